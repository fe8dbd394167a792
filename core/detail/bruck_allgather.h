// Runs plan_bruck_allgather's rounds (core/detail/bruck_allgather_plan.h):
// the executor half of the CPU group's allgather where a direct round's P-1
// messages or a ring's P-1 latencies cost more (core/detail/direct_collectives.h).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/direct_allreduce.h"
#include "dtensor/core/tensor.h"

namespace dtensor::detail {

/// Gathers every rank's `in` (counts[rank] elements) into `out` (contiguous,
/// sum(counts) elements, rank q's block at the sum of counts before q) among
/// counts.size() ranks, this being `rank`. `in` may be this rank's slot of
/// `out`. Each round's messages are posted by `post` (the receive first).
void bruck_allgather(int rank, const Tensor& in, const Tensor& out,
                     const std::vector<std::int64_t>& counts, const DirectAllreduce::Post& post);

}  // namespace dtensor::detail
