// The local loops of the pooling operators, in global coordinates: each
// rank runs them on the window the engine gathered, for the outputs it owns.
// Because every window position is named by its global input position, the
// edge rules (what is padding, the count_include_pad divisor, which of equal
// maxima wins) come out exactly as on one process.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/window.h"

namespace dtensor::window {

/// One spatial dim of a pool, for this rank's outputs.
struct PoolTaps {
  /// Window indices each local output reads, in kernel order (in range only).
  std::vector<std::vector<std::int64_t>> taps;
  /// Sliding avg_pool: the window's size counting the padding inside
  /// [-pl, L + pr), PyTorch's divisor with count_include_pad.
  std::vector<std::int64_t> padded_size;
};

/// The taps of `dim` over an input of `length`, for the outputs and window of `span`.
PoolTaps pool_taps(const WindowDim& dim, std::int64_t length, const WindowSpan& span);

/// avg_pool's divisor rule.
struct AvgDivisor {
  bool count_include_pad = true;
  std::optional<std::int64_t> divisor_override;
};

/// Local output [N, C, taps...] from `window` [N, C, window...].
Tensor max_pool_forward(const Tensor& window, const std::vector<PoolTaps>& dims);
/// The gradient over the window: each output's gradient goes to the element
/// it picked (the first maximum in kernel order; the last NaN if any).
Tensor max_pool_backward(const Tensor& window, const Tensor& grad_output,
                         const std::vector<PoolTaps>& dims);
Tensor avg_pool_forward(const Tensor& window, const std::vector<PoolTaps>& dims,
                        const AvgDivisor& rule);
Tensor avg_pool_backward(const Tensor& grad_output, const Shape& window_shape,
                         const std::vector<PoolTaps>& dims, const AvgDivisor& rule);

}  // namespace dtensor::window
