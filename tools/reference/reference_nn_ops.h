// The independent oracles of the U-Net operators: interpolation (upsample),
// the normalisations (batch_norm, group_norm, instance_norm, layer_norm), cat,
// the activations and the losses. Naive f64 loops written from the
// definitions of torch.nn.functional, in the style of reference_conv.h: they
// share no code with the library (not even its parameter structs or shape
// helpers), so agreeing with them means something.
//
// Inputs may be of any dtype (converted to f64 first); results are f64
// tensors. Malformed arguments throw std::invalid_argument (the oracle checks
// only what it needs to stay in bounds; validating like PyTorch is the
// caller's business).
//
// The definitions:
//   upsample   [N, C, L...] -> [N, C, O...] (1 to 3 spatial dims), O = size or
//              floor(L * scale_factor). Per dim, PyTorch's UpSample.h:
//              nearest: min(floorf(o * s), L - 1) with the FLOAT scale
//                       s = float(1 / scale_factor) if given, else float(L) / O
//                       (PyTorch's forward kernel); the gradient follows
//                       PyTorch's backward kernel (nearest_idx), which first
//                       maps O == L to o and O == 2L to o >> 1 (the two differ
//                       only for a scale factor giving O == L or 2L without
//                       being 1 or 2, e.g. 2.1 on L = 4);
//              linear:  O == L -> o (a copy); else with
//                       s = align_corners ? (L-1)/(O-1) (0 if O == 1)
//                                         : (1 / scale_factor or L / O),
//                       src = align_corners ? o * s : max((o + .5) s - .5, 0),
//                       i0 = min(int(src), L-1), i1 = i0 + (i0 < L-1),
//                       w1 = clamp(src - i0, 0, 1), w0 = 1 - w1;
//              several dims: the product of the per-dim weights. The gradient
//              adds each output's gradient, weighted, onto the inputs it read.
//   norms      y = (x - mean) / sqrt(var + eps) * w + b over statistics sets:
//              batch_norm per channel over N and space, group_norm per
//              (sample, group of C/G channels) over the group and space,
//              instance_norm per (sample, channel) over space, layer_norm per
//              sample over C and space (w, b of shape [C, spatial...], the
//              others' [C]); var is biased. batch_norm in training updates the
//              running statistics r' = (1-m) r + m s with the unbiased
//              variance; in eval it normalises with them. Backward, with
//              g = dy * w and xhat the normalised input, statistics from the
//              input: dx = invstd (g - mean(g) - xhat mean(g xhat)) over each
//              set; from running statistics (eval): dx = g invstd;
//              dw = sum dy xhat, db = sum dy over everything but the parameter.
//   cat        concatenation along `dim`; the gradient splits.
//   activations relu, leaky_relu (x > 0 ? x : a x), gelu (x Phi(x), or the
//              tanh approximation 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))),
//              silu (x sigmoid(x)), sigmoid, tanh, and their derivatives.
//   losses     mse_loss: sum or mean of (x - t)^2; cross_entropy with
//              class-probability targets over dim 1:
//              -sum_c t log_softmax(x)_c summed over positions, divided by
//              N * spatial for mean. Results are 0-d. Gradients:
//              2 (x - t) (/ numel) and softmax(x) sum_c t - t (/ N * spatial).
//              l1, smooth_l1, huber, bce_with_logits: one term per element.
//
// Part of the static library dtensor_reference, never linked by libdtensor.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::reference {

// ---- upsample ----------------------------------------------------------------

struct RefUpsample {
  bool linear = false;                 // nearest otherwise
  std::vector<std::int64_t> size{};    // one entry or one per spatial dim
  std::vector<double> scale_factor{};  // the same; give exactly one of the two
  bool align_corners = false;          // linear only
};

/// [N, C, O...] (O = size, or floor(L * scale_factor) in f64).
Shape ref_upsample_output_shape(const Shape& input, const RefUpsample& p);
Tensor ref_upsample_forward(const Tensor& x, const RefUpsample& p);
Tensor ref_upsample_grad_input(const Tensor& grad_out, const Shape& input_shape,
                               const RefUpsample& p);

// ---- normalisation -------------------------------------------------------------

enum class RefNormKind { Batch, Group, Instance, Layer };

struct RefNorm {
  RefNormKind kind = RefNormKind::Batch;
  std::int64_t num_groups = 1;  // group_norm
  double eps = 1e-5;
  double momentum = 0.1;  // batch_norm in training
  bool training = true;   // batch_norm; the others always use the input's statistics
};

struct RefNormForward {
  Tensor output;
  Tensor running_mean, running_var;  // batch_norm: updated in training, as given in eval
  double max_invstd = 0;             // largest 1 / sqrt(var + eps) (conditioning)
};

/// weight, bias, running_mean, running_var may be undefined (running
/// statistics are needed by batch_norm in eval mode only).
RefNormForward ref_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& running_mean, const Tensor& running_var,
                                const RefNorm& p);

struct RefNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // grad_weight, grad_bias: the parameter's shape
};
RefNormGrads ref_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                               const Tensor& running_mean, const Tensor& running_var,
                               const RefNorm& p);

/// How many elements one statistic reduces, and the parameter's shape.
std::int64_t ref_norm_set_size(const Shape& x, const RefNorm& p);
Shape ref_norm_param_shape(const Shape& x, const RefNorm& p);

// ---- cat -------------------------------------------------------------------------

Tensor ref_cat(const std::vector<Tensor>& inputs, std::int64_t dim);
std::vector<Tensor> ref_cat_grad(const Tensor& grad_out, const std::vector<Shape>& input_shapes,
                                 std::int64_t dim);

// ---- activations -------------------------------------------------------------

enum class RefActivation { Relu, LeakyRelu, Gelu, GeluTanh, Silu, Sigmoid, Tanh };

Tensor ref_activation_forward(const Tensor& x, RefActivation a, double negative_slope = 0.01);
Tensor ref_activation_grad_input(const Tensor& grad_out, const Tensor& x, RefActivation a,
                                 double negative_slope = 0.01);

// ---- losses ------------------------------------------------------------------

/// 0-d results.
Tensor ref_mse_loss(const Tensor& x, const Tensor& target, bool mean);
Tensor ref_mse_loss_grad_input(const Tensor& x, const Tensor& target, bool mean, double grad = 1.0);
Tensor ref_cross_entropy(const Tensor& x, const Tensor& target, bool mean);
Tensor ref_cross_entropy_grad_input(const Tensor& x, const Tensor& target, bool mean,
                                    double grad = 1.0);
/// F.cross_entropy with class indices: target i64 [N, d1, ...] for x
/// [N, C, d1, ...]; a position whose index is ignore_index adds nothing and
/// is not counted, any other adds (1 - s) (lse - x_t) + s / C sum_c (lse -
/// x_c); the mean divides by the count (0 / 0: NaN). An index out of [0, C)
/// that is not ignore_index throws std::invalid_argument.
Tensor ref_cross_entropy_indices(const Tensor& x, const Tensor& target, bool mean,
                                 std::int64_t ignore_index, double label_smoothing);
/// grad (softmax - ((1 - s) onehot + s / C)) at the counted positions, 0 at
/// the ignored ones, / the count for mean.
Tensor ref_cross_entropy_indices_grad_input(const Tensor& x, const Tensor& target, bool mean,
                                            std::int64_t ignore_index, double label_smoothing,
                                            double grad = 1.0);

/// The pointwise losses, naively from their definitions (d = x - t):
/// l1 |d|; smooth_l1 0.5 d^2 / beta or |d| - beta / 2 (beta 0: |d|); huber
/// 0.5 d^2 or delta (|d| - delta / 2); bce_with_logits
/// -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))). `param` is beta or
/// delta. Gradients: the derivative by x (/ numel for mean).
enum class RefPointwiseLoss { L1, SmoothL1, Huber, BceWithLogits };
Tensor ref_pointwise_loss(RefPointwiseLoss l, const Tensor& x, const Tensor& target, bool mean,
                          double param = 1.0);
Tensor ref_pointwise_loss_grad_input(RefPointwiseLoss l, const Tensor& x, const Tensor& target,
                                     bool mean, double param = 1.0, double grad = 1.0);

/// dropout with the mask of (seed, stream) as docs/operators.md defines it
/// (written out here): element i of the whole tensor is kept when the top 53
/// bits of splitmix64(key + (i + 1) * golden), key = splitmix64(seed ^
/// splitmix64(stream + golden)), over 2^53 are >= p, and scaled by
/// 1 / (1 - p); p = 1 zeroes every element. The gradient is the same
/// function of grad_output.
Tensor ref_dropout(const Tensor& x, double p, std::uint64_t seed, std::uint64_t stream);

/// F.linear over the last dim: y[r, k] = sum_i x[r, i] w[k, i] + b[k]
/// (bias undefined: none), and its gradients (grad_weight, grad_bias summed
/// over every row).
Tensor ref_linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
struct RefLinearGrads {
  Tensor grad_input, grad_weight, grad_bias;
};
RefLinearGrads ref_linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight);

/// softmax over dim 1 (rank >= 2), for making class-probability targets.
Tensor ref_softmax_dim1(const Tensor& x);

}  // namespace dtensor::reference
