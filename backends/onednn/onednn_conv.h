// The three oneDNN convolution passes (f32, bf16), one file each. Operands are
// validated by LocalConvKernels; params are expanded. Each pass takes its
// window operand (input, or grad_input) in tiles and writes outputs the
// caller allocated (the conv.* kernel slots, register.cpp).
#pragma once

#include <dnnl.hpp>

#include "backends/onednn/onednn_common.h"
#include "dtensor/ops/kernels/conv.h"
#include "dtensor/ops/local_conv.h"

namespace dtensor::onednn {

/// Into `out` (the output's shape, any strides).
void conv_forward_into(const TiledTensor& x, const Tensor& w, const Tensor& b, const ConvParams& p,
                       const Tensor& out);
/// Into every tile of `grad_input`.
void conv_backward_data(const Tensor& grad_out, const Tensor& w, const TiledTensor& grad_input,
                        const ConvParams& p);
/// Into out.grad_weight (and out.grad_bias when defined), allocated by the caller.
void conv_backward_weights(const Tensor& grad_out, const TiledTensor& x, const ConvParams& p,
                           const ConvWeightGrads& out);
/// The forward primitive descriptor the backward passes need as a hint (oneDNN
/// picks backward implementations and layouts compatible with it).
dnnl::convolution_forward::primitive_desc forward_pd(DType t, const ConvDims& d, bool bias);

/// The three passes of a `narrow` (bf16, f16) convolution computed in f32:
/// the operands widened, the results rounded once (widened_conv.cpp).
kernels::DenseConvPasses widened_conv_passes(DType narrow);

}  // namespace dtensor::onednn
