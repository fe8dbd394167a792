// Moving halos along one sharded spatial dim (DESIGN.md §5), over the group
// of the mesh dim that shards it. The convolution handler calls these; they
// know ranges and a ProcessGroup, never sockets.
#pragma once

#include <cstdint>

#include "dtensor/core/process_group.h"
#include "ops/conv/halo_plan.h"

namespace dtensor::conv {

/// Forward: the window [a', b'] of `local` (which owns me.input along tensor
/// dim `dim`): the own part copied, the rest received from its owners, while
/// this rank sends what the others' windows need from it.
Tensor gather_window(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                     ProcessGroup& group);

/// Backward: the reverse. `grad_window` is a gradient over the window; the
/// parts owned by others are sent to them and added there, the parts others
/// send are added here. Returns the gradient over the owned range (shape of
/// `owned_shape`); positions in no window get 0.
Tensor scatter_add_window(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                          ProcessGroup& group, const Shape& owned_shape);

}  // namespace dtensor::conv
