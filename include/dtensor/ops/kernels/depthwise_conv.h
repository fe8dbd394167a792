// The kernel slot of a depthwise convolution's weight gradient where oneDNN
// has no kernel of its own: oneDNN 2.6 runs the depthwise backward-weights
// pass in its depthwise JIT only for kernels up to 3x3, and falls back to a
// GEMM over an im2col copy (or its generic JIT on channels-last) for larger
// ones, 15-40x slower than the forward pass of the same layer. The oneDNN
// backend runs this slot instead for those shapes (docs/performance.md).
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor::kernels {

/// A 2-D depthwise convolution (one filter per channel, weight [C, 1, kh, kw])
/// with stride 1 and dilation 1:
///   grad_weight[c, 0, i, j] = sum over n, y, x of grad_output[n, c, y, x] *
///                             input[n, c, y + i - pad_top, x + j - pad_left]
/// with the input zero outside [0, H) x [0, W); grad_bias[c] = the sum of
/// grad_output[:, c]. The input is the (halo) window as tiles, any strides;
/// kh = Ho - H + 1 + pad_top + pad_bottom follows from the shapes.
struct DepthwiseWeightGradArgs {
  TiledTensor input;   // [N, C, H, W]
  Tensor grad_output;  // [N, C, Ho, Wo]
  std::int64_t pad_top = 0, pad_left = 0;
  Tensor grad_weight;  // out: [C, 1, kh, kw], contiguous
  Tensor grad_bias;    // out: [C], or undefined for none
};

/// The kernel widths the CPU kernel takes (its taps are held in registers).
inline constexpr std::int64_t kDepthwiseWeightGradMaxWidth = 8;

inline constexpr KernelSlot<DepthwiseWeightGradArgs> kDepthwiseWeightGrad{
    "conv.depthwise_weight_grad"};

}  // namespace dtensor::kernels
