// The independent oracle of the tests and of dtensor-conv --check: a naive
// direct convolution in f64, written from the
// definition y[n,o,j] = b[o] + sum_{c,k} w[o,c,k] * x[n, g*C/G + c, j*s - pl + k*d]
// (zero outside the input). It shares no code with the library's kernels or its
// shape helpers (docs/design.md §6), so agreeing with it means something.
//
// Inputs may be of any dtype (converted to f64 first); results are f64 tensors.
// 1 to 3 spatial dims; padding (left, right) per dim; any stride, dilation, groups.
// Unlike the library, zero-length spatial inputs are fine (outputs then read only
// padding), which the halo simulation relies on.
//
// A static library of its own (dtensor_reference), linked by the test support
// library and by dtensor-conv, never by libdtensor: the library must not be
// able to call its own oracle.
#pragma once

#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"

namespace dtensor::reference {

/// y = conv(x, w) + b; `b` may be undefined.
Tensor ref_conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p);
/// d loss / d x for an input of `input_shape`, given d loss / d y.
Tensor ref_conv_grad_input(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                           const ConvParams& p);
/// d loss / d w for a weight of `weight_shape`.
Tensor ref_conv_grad_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                            const ConvParams& p);
/// d loss / d b: grad_out summed over everything but the channels.
Tensor ref_conv_grad_bias(const Tensor& grad_out);

}  // namespace dtensor::reference
