// --bench: medians of the distributed passes and of the local kernel alone on
// this rank's window (local_window.h), so that overhead = distributed / local
// measures what distribution costs, in the same run on the same machine.
#pragma once

#include <optional>

#include "dtensor/core/device_mesh.h"
#include "tools/dtensor-conv/options.h"
#include "tools/dtensor-conv/problem.h"

namespace dtensor::conv_cli {

struct BenchTimes {
  // Milliseconds; unset when not measured (bwd without --backward).
  std::optional<double> fwd_ms, bwd_ms, local_fwd_ms, local_bwd_ms;
};

/// Median of `v` (the mean of the middle two for an even count); NaN when empty.
double median(std::vector<double> v);

/// Collective over the world: every rank calls it. The distributed pass and
/// the local kernel alternate, iteration by iteration, each started by all
/// ranks together after a barrier; a time is the median over iterations of
/// the slowest rank's.
BenchTimes run_bench(const Options& o, const DeviceMesh& mesh, const Operands& operands,
                     const Seeds& seeds);

}  // namespace dtensor::conv_cli
