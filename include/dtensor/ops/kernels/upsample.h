// The kernel slots of upsample (F.interpolate: nearest and linear, 1 to 3
// spatial dims), forward and backward. ops/window plans, per spatial dim,
// which window positions each local output reads and with what weight
// (ResampleTaps, from WindowDim::resample_source in global coordinates), and
// gathers the window and returns its gradient to the owners; these do the
// arithmetic over the taps.
//
// Each output reads at most two positions per dim, so the interpolation is
// the separable product of the per-dim taps. Tensors are [N, C, spatial...]
// of the slot's dtype and device; outputs are allocated by the caller. The
// forward takes views, the window and the output at any strides with their
// last dim contiguous (a tile of a halo window where it lies, a band of the
// output). So does the backward with `accumulate`: grad_output at any
// strides, and grad_window a view the caller zeroed, added into; without
// it every tensor is contiguous and grad_window is overwritten.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// One spatial dim of an interpolation, for this rank's outputs: the window
/// positions output o reads (i0[o], and i1[o] when taps == 2) and their
/// weights w0[o], w1[o]. Nearest has one tap of weight 1.
struct ResampleTaps {
  std::vector<std::int64_t> i0, i1;
  std::vector<double> w0, w1;
  int taps = 1;  // 1 nearest, 2 linear
};

/// output [N, C, outputs...] = sum over each output's taps of weight * window.
struct UpsampleForwardArgs {
  Tensor window;  // [N, C, window...]
  std::vector<ResampleTaps> dims;
  Tensor output;  // out
};
/// grad_window (the window's shape) = each output's gradient times the
/// weight, added at every tap it read; zero elsewhere.
struct UpsampleBackwardArgs {
  Tensor grad_output;  // [N, C, outputs...]
  std::vector<ResampleTaps> dims;
  Tensor grad_window;       // out, [N, C, window...]
  bool accumulate = false;  // add into grad_window (see above)
};

inline constexpr KernelSlot<UpsampleForwardArgs> kUpsampleForward{"upsample.forward"};
inline constexpr KernelSlot<UpsampleBackwardArgs> kUpsampleBackward{"upsample.backward"};

/// The output shape of an interpolation of `window_shape` with these taps.
inline Shape resample_output_shape(const Shape& window_shape,
                                   const std::vector<ResampleTaps>& dims) {
  Shape s{window_shape.at(0), window_shape.at(1)};
  for (const auto& d : dims)
    s.push_back(static_cast<std::int64_t>(d.i0.size()));
  return s;
}

}  // namespace dtensor::kernels
