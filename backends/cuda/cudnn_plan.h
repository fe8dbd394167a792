// How a convolution of the library (NC(D)HW, 1-3 spatial dims, asymmetric
// padding) maps onto cuDNN's legacy convolution API, which wants at least
// 4-D tensors and pads symmetrically. Pure shape arithmetic: unit-tested
// without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/ops/conv_params.h"

namespace dtensor::cuda_backend {

enum class ConvPass { Forward, BackwardData, BackwardWeights };

struct CudnnConvPlan {
  /// The original input, after we add the zeros cuDNN cannot (see prepad).
  Shape padded_input;
  /// Zeros added to each original spatial dim: cuDNN pads min(left, right) on
  /// both sides, we add the remainder on the longer side.
  std::vector<std::pair<std::int64_t, std::int64_t>> prepad;
  /// A 1-D convolution runs as 2-D with a unit height (cuDNN needs >= 4-D).
  bool promoted_1d = false;

  // What cuDNN sees (rank >= 4): tensors, and per spatial dim the symmetric
  // padding, stride and dilation.
  Shape x, w, y;
  std::vector<int> pad, stride, dilation;
  int groups = 1;

  bool needs_prepad() const;
  /// Identifies (pass, dtype, shapes, parameters) for the algorithm cache.
  std::string key(ConvPass pass, DType dtype, int device) const;
};

/// `params` must be expanded to the spatial rank and the shapes validated
/// (LocalConvKernels does both before calling a backend).
CudnnConvPlan plan_cudnn_conv(const Shape& input, const Shape& weight, const ConvParams& params);

}  // namespace dtensor::cuda_backend
