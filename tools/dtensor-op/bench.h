// --bench: medians of the distributed operator (forward, and backward with
// --backward) and of the same library operator on a mesh of this rank alone,
// applied to this rank's own shard as a whole tensor. overhead = distributed
// / local is then what distribution costs (the halo exchange, redistribution,
// the agreement checks), measured in the same run on the same machine.
#pragma once

#include <optional>

#include "dtensor/core/device_mesh.h"
#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::op_cli {

struct BenchTimes {
  // Milliseconds; unset when not measured (bwd without --backward; local
  // when some rank's shard is too small for the operator on its own).
  std::optional<double> fwd_ms, bwd_ms, local_fwd_ms, local_bwd_ms;
};

/// Collective over the world: every rank calls it. Each timed run is started
/// by all ranks together after a barrier; a time is the median over
/// iterations of the slowest rank's.
BenchTimes run_bench(const Options& o, const DeviceMesh& mesh, const Operands& ops,
                     const Seeds& seeds);

}  // namespace dtensor::op_cli
