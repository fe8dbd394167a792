// The plan of upsample's local arithmetic: per spatial dim, which window
// positions each of this rank's outputs reads and with what weight, from
// WindowDim::resample_source in global coordinates and shifted into the
// window the engine gathered. The kernels (dtensor/ops/kernels/upsample.h)
// then interpolate over these taps.
#pragma once

#include <cstdint>

#include "dtensor/ops/kernels/upsample.h"
#include "dtensor/ops/window.h"

namespace dtensor::window {

/// The taps of `dim` (a Resample dim) over an input of `length`, for `span`.
/// `backward`: PyTorch's backward index rule (see WindowDim::resample_source).
kernels::ResampleTaps resample_taps(const WindowDim& dim, std::int64_t length,
                                    const WindowSpan& span, bool backward = false);

}  // namespace dtensor::window
