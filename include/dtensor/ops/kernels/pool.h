// The kernel slots of the pooling operators (max, avg and their adaptive
// forms), forward and backward. ops/window plans, per spatial dim, which
// window positions each local output reads (PoolTaps, in kernel order; a
// pure function of the global shape and the rank's window), gathers the
// window and scatters its gradient back; these reduce over the taps.
//
// Because every tap is named by its global input position, the edge rules
// (what is padding, count_include_pad's divisor, which of equal maxima wins)
// come out as on one process. Tensors are [N, C, spatial...] of the slot's
// dtype and device; outputs are allocated by the caller. The forwards take
// views: the window at any strides (a tile of a halo window, where it lies)
// and the output at any strides with its last dim contiguous (a band of the
// output), so a handler runs them on pieces of the window without copying
// it. So do the backwards with `accumulate`: they read grad_output at any
// strides (its last dim contiguous) and add into grad_window, a view the
// caller zeroed (max_pool's laid out as `window`, the same strides), so
// that a handler writes the gradient of each band straight into the tiles
// of the window's gradient. Without it every tensor is contiguous and
// grad_window is overwritten.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// One spatial dim of a pool, for this rank's outputs.
struct PoolTaps {
  /// Window indices each local output reads, in kernel order (in range only).
  std::vector<std::vector<std::int64_t>> taps;
  /// Sliding avg_pool: the window's size counting the padding inside
  /// [-pl, L + pr), PyTorch's divisor with count_include_pad.
  std::vector<std::int64_t> padded_size;
};

/// avg_pool's divisor rule.
struct AvgDivisor {
  bool count_include_pad = true;
  std::optional<std::int64_t> divisor_override = std::nullopt;
};

/// output [N, C, outputs...] = max over each output's taps of `window`
/// [N, C, window...]: the first maximum in kernel order; NaN wins (the last).
struct MaxPoolForwardArgs {
  Tensor window;
  std::vector<PoolTaps> dims;
  Tensor output;  // out
};
/// grad_window (the window's shape) = each output's gradient added at the
/// tap the forward picked; zero elsewhere.
struct MaxPoolBackwardArgs {
  Tensor window, grad_output;
  std::vector<PoolTaps> dims;
  Tensor grad_window;       // out
  bool accumulate = false;  // add into grad_window (see above)
};
struct AvgPoolForwardArgs {
  Tensor window;
  std::vector<PoolTaps> dims;
  AvgDivisor rule;
  Tensor output;  // out
};
/// grad_window = each output's gradient / its divisor, added at every tap.
struct AvgPoolBackwardArgs {
  Tensor grad_output;
  std::vector<PoolTaps> dims;
  AvgDivisor rule;
  Tensor grad_window;       // out, [N, C, window...]
  bool accumulate = false;  // add into grad_window (see above)
};

inline constexpr KernelSlot<MaxPoolForwardArgs> kMaxPoolForward{"pool.max_forward"};
inline constexpr KernelSlot<MaxPoolBackwardArgs> kMaxPoolBackward{"pool.max_backward"};
inline constexpr KernelSlot<AvgPoolForwardArgs> kAvgPoolForward{"pool.avg_forward"};
inline constexpr KernelSlot<AvgPoolBackwardArgs> kAvgPoolBackward{"pool.avg_backward"};

/// Whether two tensors of one shape lie alike in memory (strides compared
/// where the size is above 1): max_pool's backward with `accumulate` needs
/// its window and grad_window so, as a tap is one offset into both.
inline bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t d = 0; d < a.shape().size(); ++d)
    if (a.shape()[d] > 1 && a.strides()[d] != b.strides()[d]) return false;
  return true;
}

/// The output shape of a pool over `window_shape` with these taps.
inline Shape pool_output_shape(const Shape& window_shape, const std::vector<PoolTaps>& dims) {
  Shape s{window_shape.at(0), window_shape.at(1)};
  for (const auto& d : dims)
    s.push_back(static_cast<std::int64_t>(d.taps.size()));
  return s;
}

}  // namespace dtensor::kernels
