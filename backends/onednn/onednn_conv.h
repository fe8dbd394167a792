// The three oneDNN convolution passes (f32, bf16), one file each. Operands are
// validated by LocalConvKernels; params are expanded. Each pass takes its
// window operand (input, or grad_input) as a plain tensor or in tiles.
#pragma once

#include <dnnl.hpp>

#include "backends/onednn/onednn_common.h"
#include "dtensor/ops/local_conv.h"

namespace dtensor::onednn {

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p);
Tensor conv_forward(const TiledTensor& x, const Tensor& w, const Tensor& b, const ConvParams& p);
/// Into `out` (the output's shape, any strides).
void conv_forward_into(const TiledTensor& x, const Tensor& w, const Tensor& b, const ConvParams& p,
                       const Tensor& out);

Tensor conv_backward_data(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                          const ConvParams& p);
void conv_backward_data(const Tensor& grad_out, const Tensor& w, const TiledTensor& grad_input,
                        const ConvParams& p);

ConvWeightGrads conv_backward_weights(const Tensor& grad_out, const Tensor& x,
                                      const Shape& weight_shape, const ConvParams& p,
                                      bool want_bias);
ConvWeightGrads conv_backward_weights(const Tensor& grad_out, const TiledTensor& x,
                                      const Shape& weight_shape, const ConvParams& p,
                                      bool want_bias);

/// The forward primitive descriptor the backward passes need as a hint (oneDNN
/// picks backward implementations and layouts compatible with it).
dnnl::convolution_forward::primitive_desc forward_pd(DType t, const ConvDims& d, bool bias);

}  // namespace dtensor::onednn
