// The plan of a pool's local reduction: which window positions each of the
// rank's outputs reads (dtensor/ops/kernels/pool.h runs it), a pure function
// of the global shape and the rank's window.
#pragma once

#include <cstdint>

#include "dtensor/ops/kernels/pool.h"
#include "dtensor/ops/window.h"

namespace dtensor::window {

using kernels::AvgDivisor;
using kernels::PoolTaps;

/// The taps of `dim` over an input of `length`, for the outputs and window of `span`.
PoolTaps pool_taps(const WindowDim& dim, std::int64_t length, const WindowSpan& span);

}  // namespace dtensor::window
