// The local loops of upsample, in global coordinates: each rank runs them on
// the window the engine gathered, for the outputs it owns. Each output reads
// at most two inputs per spatial dim (WindowDim::resample_source), so the
// separable product of the per-dim taps is the interpolation.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/window.h"

namespace dtensor::window {

/// One spatial dim of an interpolation, for this rank's outputs: the window
/// positions each local output reads and their weights (nearest: one tap).
struct ResampleTaps {
  std::vector<std::int64_t> i0, i1;
  std::vector<double> w0, w1;
  int taps = 1;  // 1 nearest, 2 linear
};

/// The taps of `dim` (a Resample dim) over an input of `length`, for `span`.
/// `backward`: PyTorch's backward index rule (see WindowDim::resample_source).
ResampleTaps resample_taps(const WindowDim& dim, std::int64_t length, const WindowSpan& span,
                           bool backward = false);

/// Local output [N, C, outputs...] from `window` [N, C, window...]; computed in f64.
Tensor upsample_forward(const Tensor& window, const std::vector<ResampleTaps>& dims);
/// The gradient over a window of `window_shape` from the local grad_output.
Tensor upsample_backward(const Tensor& grad_output, const Shape& window_shape,
                         const std::vector<ResampleTaps>& dims);

}  // namespace dtensor::window
