// The independent oracles of the window operators other than the zero-padded
// convolution (include/dtensor/ops/window_ops.h): transposed convolution,
// max / average pooling, adaptive pooling, padding, and convolution with a
// padding_mode. Naive f64 loops written from PyTorch's definitions, in the
// style of reference_conv.h: they share no code with the library's operators
// or its shape helpers (output lengths are computed here, from PyTorch's
// formulas), so agreeing with them means something.
//
// Inputs may be of any dtype (converted to f64 first); results are f64
// tensors. Inputs are [N, C, spatial...] with 1 to 3 spatial dims. Every
// per-dim list of the parameter structs may hold 0 entries (the default), one
// (for every dim) or one per spatial dim; a pool's empty stride means its
// kernel. Malformed arguments throw std::invalid_argument (the oracle checks
// only what it needs to stay in bounds; validating like PyTorch is the
// caller's business).
//
// The definitions, per spatial dim of length L:
//   conv_transpose  y[n, g*K/G + o, i*s - p + k*d] += x[n, g*C/G + c, i] * w[g*C/G + c, o, k]
//                   (+ bias), O = (L-1)*s - 2p + d*(k-1) + output_padding + 1;
//   max_pool        O = floor_or_ceil((L + pl + pr - d*(k-1) - 1) / s) + 1, and with
//                   ceil_mode the last window is dropped when (O-1)*s >= L + pl.
//                   Each window is scanned in row-major kernel order over its
//                   in-range elements from maxval = -inf, maxindex = the first
//                   of them, taking `v > maxval || isnan(v)`: ties keep the first
//                   maximum, the last NaN wins; the gradient goes to maxindex. A
//                   window without any in-range element (possible only with
//                   ceil_mode and a large dilation) yields -inf and no gradient;
//   avg_pool        PyTorch's CPU kernels: start = o*s - pl, end = min(start + k, L + pr),
//                   pool_size = end - start, then [start, end) clipped to [0, L);
//                   divisor = divisor_override, else pool_size (count_include_pad),
//                   else the clipped count, each a product over the dims; an
//                   empty clipped window gives 0. Backward spreads grad/divisor
//                   over the clipped window;
//   adaptive pools  window i spans [floor(i*L/O), ceil((i+1)*L/O));
//   pad             output j reads input j - pl: constant -> `value` outside
//                   [0, L) (negative padding crops), reflect -> mirrored about
//                   the end elements (pad < L), replicate -> clamped, circular
//                   -> modulo L; backward adds each output's gradient to the
//                   element it read (nothing for constant padding values);
//   conv + padding_mode (reflect, replicate, circular): pad with that mode,
//                   then ref_conv_forward with zero padding.
//
// Part of the static library dtensor_reference, never linked by libdtensor.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/window_ops.h"

namespace dtensor::reference {

/// One (left, right) pair per spatial dim, or one for every dim.
using PadPairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

// ---- output lengths (PyTorch's formulas, one dim) ----------------------------

/// (L - 1)*s - 2p + d*(k - 1) + output_padding + 1.
std::int64_t ref_conv_transpose_length(std::int64_t length, std::int64_t kernel,
                                       std::int64_t stride, std::int64_t padding,
                                       std::int64_t output_padding, std::int64_t dilation);
/// PyTorch's pooling_output_shape_pad_lr (see above); may be < 1 (empty).
std::int64_t ref_pool_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                             std::int64_t dilation, std::int64_t pad_left, std::int64_t pad_right,
                             bool ceil_mode);

// ---- transposed convolution --------------------------------------------------

/// y = conv_transpose(x, w) + b; `b` may be undefined. w [C, K/groups, k...].
Tensor ref_conv_transpose_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                  const ConvTransposeParams& p);
/// d loss / d x for an input of `input_shape`, given d loss / d y.
Tensor ref_conv_transpose_grad_input(const Tensor& grad_out, const Tensor& w,
                                     const Shape& input_shape, const ConvTransposeParams& p);
/// d loss / d w for a weight of `weight_shape`.
Tensor ref_conv_transpose_grad_weight(const Tensor& grad_out, const Tensor& x,
                                      const Shape& weight_shape, const ConvTransposeParams& p);
/// d loss / d b: grad_out summed over everything but the channels.
Tensor ref_conv_transpose_grad_bias(const Tensor& grad_out);

// ---- pooling -----------------------------------------------------------------

/// max_pool (kernel, stride, padding, dilation, ceil_mode of `p`).
Tensor ref_max_pool_forward(const Tensor& x, const PoolParams& p);
/// The gradient of max_pool: grad_out[o] added to the input element window o picked.
Tensor ref_max_pool_grad_input(const Tensor& grad_out, const Tensor& x, const PoolParams& p);

/// avg_pool (kernel, stride, padding, ceil_mode, count_include_pad,
/// divisor_override of `p`; its dilation must be 1).
Tensor ref_avg_pool_forward(const Tensor& x, const PoolParams& p);
Tensor ref_avg_pool_grad_input(const Tensor& grad_out, const Shape& input_shape,
                               const PoolParams& p);

/// Adaptive pools: `output_size` one entry for every spatial dim or one per dim.
Tensor ref_adaptive_avg_pool_forward(const Tensor& x, const std::vector<std::int64_t>& output_size);
Tensor ref_adaptive_avg_pool_grad_input(const Tensor& grad_out, const Shape& input_shape,
                                        const std::vector<std::int64_t>& output_size);
Tensor ref_adaptive_max_pool_forward(const Tensor& x, const std::vector<std::int64_t>& output_size);
Tensor ref_adaptive_max_pool_grad_input(const Tensor& grad_out, const Tensor& x,
                                        const std::vector<std::int64_t>& output_size);

// ---- padding -----------------------------------------------------------------

/// The spatial dims padded by (left, right) per dim (in dim order).
Tensor ref_pad_forward(const Tensor& x, const PadPairs& padding, PadMode mode, double value = 0.0);
Tensor ref_pad_grad_input(const Tensor& grad_out, const Shape& input_shape, const PadPairs& padding,
                          PadMode mode);

// ---- convolution with a padding_mode -----------------------------------------

/// conv with p.padding_mode: Zeros is ref_conv_forward itself; reflect,
/// replicate and circular pad x by p.padding with that mode and convolve the
/// padded input without padding.
Tensor ref_conv_padding_mode_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                     const ConvParams& p);
Tensor ref_conv_padding_mode_grad_input(const Tensor& grad_out, const Tensor& w,
                                        const Shape& input_shape, const ConvParams& p);
Tensor ref_conv_padding_mode_grad_weight(const Tensor& grad_out, const Tensor& x,
                                         const Shape& weight_shape, const ConvParams& p);

}  // namespace dtensor::reference
