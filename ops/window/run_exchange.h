// The window engine's general executor: assembles a rank's window along one
// dim from its plan's runs (any boundary: forward, reflected and replicated
// runs, own and received), and returns a gradient over the window to the
// owners of its sources. One message per peer and direction: a rank packs,
// in the receiver's window order, every run of the receiver's window it owns.
//
// The convolution's zero-padded forward uses the tiled executor
// (ops/conv/halo_exchange.h) instead, which reads the window where it lies.
#pragma once

#include <cstdint>

#include "dtensor/core/process_group.h"
#include "ops/window/halo_plan.h"

namespace dtensor::window {

/// The window of `local` (owning me.input along `dim`) by me.runs, in one
/// tensor; sends the others their runs. `group` may be null when the plan
/// has one rank.
Tensor gather_runs(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                   ProcessGroup* group, int tag);

/// The reverse: `grad_window` (the window's extent along `dim`) summed onto
/// the owners; returns the gradient over the owned range, of `owned_shape`.
Tensor scatter_add_runs(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                        ProcessGroup* group, const Shape& owned_shape, int tag);

}  // namespace dtensor::window
