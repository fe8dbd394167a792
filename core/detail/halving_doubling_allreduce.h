// Runs plan_halving_doubling's steps (core/detail/halving_doubling_plan.h) on
// a buffer: the executor half of the CPU group's allreduce for the sizes
// where a ring's 2(P-1) latencies cost more (core/detail/direct_collectives.h).
#pragma once

#include "dtensor/core/direct_allreduce.h"
#include "dtensor/core/process_group.h"
#include "dtensor/core/tensor.h"

namespace dtensor::detail {

/// Reduces `t` (contiguous, CPU: every rank's contribution) in place among
/// `size` ranks, this being `rank`. Each step's messages are posted by `post`
/// (the receive first) and waited for before its arithmetic; Avg sums, then
/// divides once at the end.
void halving_doubling_allreduce(int rank, int size, Tensor& t, ReduceOp op,
                                const DirectAllreduce::Post& post);

}  // namespace dtensor::detail
