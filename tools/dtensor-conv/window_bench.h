// dtensor-conv's --bench: medians of the distributed passes and of the local
// kernel alone on this rank's window (local_window.h), so that overhead =
// distributed / local measures what distribution costs, in the same run on
// the same machine.
#pragma once

#include "dtensor/core/device_mesh.h"
#include "tools/dtensor-op/bench.h"
#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::conv_cli {

/// Collective over the world: every rank calls it. The distributed pass and
/// the local kernel alternate, iteration by iteration (timing.h); a rank
/// that owns no output times nothing (0 ms) but still takes part.
op_cli::BenchTimes run_window_bench(const op_cli::Options& o, const DeviceMesh& mesh,
                                    const op_cli::Operands& operands, const cli::Seeds& seeds);

}  // namespace dtensor::conv_cli
