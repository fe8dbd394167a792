#include "tools/dtensor-op/check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tools/dtensor-conv/tolerance.h"
#include "tools/reference/reference_conv.h"
#include "tools/reference/reference_nn_ops.h"
#include "tools/reference/reference_reductions.h"
#include "tools/reference/reference_tensor_ops.h"
#include "tools/reference/reference_view_ops.h"
#include "tools/reference/reference_window_ops.h"

namespace dtensor::op_cli {
namespace {

using Int = std::int64_t;

Int prod_from(const Shape& s, std::size_t first) {
  Int p = 1;
  for (std::size_t i = first; i < s.size(); ++i)
    p *= s[i];
  return p;
}

// Largest |got - ref|, where equal values (infinities included: a max pool
// window without any input element yields -inf, as PyTorch's) and NaN
// against NaN count as no error, and NaN against a number as an infinite one.
double max_abs_err(const Tensor& got, const Tensor& ref) {
  const Tensor a = got.to(DType::F64), b = ref.to(DType::F64);
  const double *pa = a.data<double>(), *pb = b.data<double>();
  double err = 0;
  for (Int i = 0; i < a.numel(); ++i) {
    if (pa[i] == pb[i] || (std::isnan(pa[i]) && std::isnan(pb[i]))) continue;
    const double d = std::abs(pa[i] - pb[i]);
    err = std::max(err, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return err;
}

// Largest finite |ref| (the scale of the tolerance).
double max_finite_abs(const Tensor& ref) {
  const Tensor b = ref.to(DType::F64);
  double m = 0;
  for (Int i = 0; i < b.numel(); ++i)
    if (std::isfinite(b.data<double>()[i])) m = std::max(m, std::abs(b.data<double>()[i]));
  return m;
}

// `exact`: the result is a selection or a copy of input values, so it must
// equal the oracle's bit for bit. `factor` widens the tolerance where the
// result amplifies rounding errors (the normalisations' 1 / std).
TensorCheck compare(const std::string& name, const Tensor& got, const Tensor& ref, Int terms,
                    DType dtype, int ranks, bool exact = false, double factor = 1.0) {
  TensorCheck c;
  c.name = name;
  c.ref_max = max_finite_abs(ref);
  c.tolerance = exact ? 0.0 : conv_cli::tolerance(dtype, terms, ranks, c.ref_max) * factor;
  if (!got.defined() || got.shape() != ref.shape()) {
    // A missing result or a wrong shape is a failure, reported as an infinite error.
    c.max_abs_err = std::numeric_limits<double>::infinity();
    return c;
  }
  c.max_abs_err = max_abs_err(got, ref);
  c.ok = c.max_abs_err <= c.tolerance;
  return c;
}

// How many adaptive windows (at most) read one input element, and how many
// elements (at most) one window reads: ceil(L/O) + 1 per dim, a bound for both.
Int adaptive_terms(const Options& o) {
  Int t = 1;
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const Int L = o.input[2 + static_cast<std::size_t>(i)];
    const Int O = o.output_size[static_cast<std::size_t>(i)];
    t *= (L + O - 1) / O + 1;
  }
  return t;
}

// How many outputs (at most) read one input element of pad.
Int pad_terms(const Options& o) {
  Int t = 1;
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const Int L = std::max<Int>(o.input[2 + static_cast<std::size_t>(i)], 1);
    const auto [l, r] = o.padding[static_cast<std::size_t>(i)];
    t *= 1 + (std::abs(l) + L - 1) / L + (std::abs(r) + L - 1) / L;
  }
  return t;
}

reference::RefUpsample ref_upsample(const Options& o) {
  reference::RefUpsample p;
  p.linear = o.upsample_mode == UpsampleMode::Linear;
  p.size = o.size;
  p.scale_factor = o.scale;
  p.align_corners = o.align_corners;
  return p;
}

reference::RefNorm ref_norm(const Options& o) {
  reference::RefNorm p;
  p.kind = o.op == OpKind::BatchNorm      ? reference::RefNormKind::Batch
           : o.op == OpKind::GroupNorm    ? reference::RefNormKind::Group
           : o.op == OpKind::InstanceNorm ? reference::RefNormKind::Instance
                                          : reference::RefNormKind::Layer;
  p.num_groups = o.num_groups;
  p.eps = o.eps;
  p.momentum = o.momentum;
  p.training = o.training;
  return p;
}

reference::RefActivation ref_activation(const Options& o) {
  switch (o.op) {
    case OpKind::LeakyRelu:
      return reference::RefActivation::LeakyRelu;
    case OpKind::Gelu:
      return o.approximate == GeluApproximate::Tanh ? reference::RefActivation::GeluTanh
                                                    : reference::RefActivation::Gelu;
    case OpKind::Silu:
      return reference::RefActivation::Silu;
    case OpKind::Sigmoid:
      return reference::RefActivation::Sigmoid;
    case OpKind::Tanh:
      return reference::RefActivation::Tanh;
    default:
      return reference::RefActivation::Relu;
  }
}

// The tensor API's element-wise operators: one operation per element (a
// few for the transcendental ones and the gradients); the other operand's
// gradient sums over the elements it was broadcast to.
void check_tensor_api(const Options& o, const GlobalTensors& g, int ranks,
                      std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const std::string op(op_name(o.op));
  const DType dt = o.dtype;
  if (o.is_binary()) {
    // maximum and minimum select an operand: exact.
    const bool select = o.op == OpKind::Maximum || o.op == OpKind::Minimum;
    out.push_back(compare("output", g.output, ref_binary_forward(op, g.input, g.other), 2, dt,
                          ranks, select));
    if (!o.backward) return;
    const auto [ga, gb] = ref_binary_grads(op, g.grad_output, g.input, g.other);
    const Int repeats = std::max<Int>(g.input.numel() / std::max<Int>(g.other.numel(), 1), 1);
    out.push_back(compare("grad_input", g.grad_input, ga, 4, dt, ranks));
    out.push_back(compare("grad_other", g.grad_other, gb, repeats + 4, dt, ranks));
    return;
  }
  RefUnary p;
  p.min = o.min;
  p.max = o.max;
  p.exponent = o.exponent;
  out.push_back(compare("output", g.output, ref_unary_forward(op, g.input, p), 4, dt, ranks));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_unary_grad_input(op, g.grad_output, g.input, p), 8, dt, ranks));
}

// The shape operators move values: output and grad_input must equal the
// oracle's bit for bit (each grad_input element is one grad_output element or
// zero).
void check_view(const Options& o, const GlobalTensors& g, int ranks,
                std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const Shape& x = g.input.shape();
  Tensor y, gx;
  switch (o.op) {
    case OpKind::Reshape:
    case OpKind::Flatten:
      y = ref_reshape(g.input, o.output_shape());
      if (o.backward) gx = ref_reshape(g.grad_output, x);
      break;
    case OpKind::Permute:
    case OpKind::Transpose: {
      std::vector<Int> order(x.size());
      for (std::size_t k = 0; k < order.size(); ++k)
        order[k] = static_cast<Int>(k);
      if (o.op == OpKind::Permute)
        order = o.order;
      else
        std::swap(order[static_cast<std::size_t>(o.dim0)], order[static_cast<std::size_t>(o.dim1)]);
      y = ref_permute(g.input, order);
      if (o.backward) gx = ref_permute_grad_input(g.grad_output, order);
      break;
    }
    case OpKind::Narrow:
      y = ref_narrow(g.input, o.dim, o.start, o.length);
      if (o.backward) gx = ref_narrow_grad_input(g.grad_output, x, o.dim, o.start);
      break;
    default:
      break;
  }
  out.push_back(compare("output", g.output, y, 1, o.dtype, ranks, true));
  if (o.backward) out.push_back(compare("grad_input", g.grad_input, gx, 1, o.dtype, ranks, true));
}

// The reductions (N terms per result, N the number of elements reduced into
// it; amax and amin select an element: exact) and softmax / log_softmax (a
// sum along the dim, then a few operations per element).
void check_reductions(const Options& o, const GlobalTensors& g, int ranks,
                      std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const std::string op(op_name(o.op));
  const DType dt = o.dtype;
  if (o.is_softmax()) {
    const bool lg = o.op == OpKind::LogSoftmax;
    const Int n = o.input[static_cast<std::size_t>(o.dim)];
    out.push_back(
        compare("output", g.output, ref_softmax_forward(lg, g.input, o.dim), n + 4, dt, ranks));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_softmax_grad_input(lg, g.grad_output, g.input, o.dim), 2 * n + 8,
                            dt, ranks));
    return;
  }
  Int n = 1;
  for (Int d : o.dims)
    n *= o.input[static_cast<std::size_t>(d)];
  const bool select = o.op == OpKind::Amax || o.op == OpKind::Amin;
  out.push_back(compare("output", g.output,
                        ref_reduce_forward(op, g.input, o.dims, o.keepdim, o.correction), n + 4, dt,
                        ranks, select));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_reduce_grad_input(op, g.grad_output, g.input, o.dims, o.correction),
                          n + 8, dt, ranks));
}

// cross_entropy: class indices (ignore_index, label_smoothing) against the
// naive oracle; probabilities against the probability oracle on the
// smoothed target (1 - s) t + s / C, computed here in f64.
void check_cross_entropy(const Options& o, const GlobalTensors& g, int ranks,
                         std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const bool mean = o.reduction == LossReduction::Mean;
  const Int C = o.input[1];
  Tensor y, gx;
  if (o.class_indices) {
    y = ref_cross_entropy_indices(g.input, g.target, mean, o.ignore_index, o.label_smoothing);
    if (o.backward)
      gx = ref_cross_entropy_indices_grad_input(g.input, g.target, mean, o.ignore_index,
                                                o.label_smoothing);
  } else {
    Tensor t = g.target.to(DType::F64);
    const double s = o.label_smoothing;
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<double>()[i] = (1 - s) * t.data<double>()[i] + s / static_cast<double>(C);
    y = ref_cross_entropy(g.input, t, mean);
    if (o.backward) gx = ref_cross_entropy_grad_input(g.input, t, mean);
  }
  out.push_back(compare("output", g.output, y, g.input.numel() + 1, o.dtype, ranks));
  if (o.backward) out.push_back(compare("grad_input", g.grad_input, gx, C + 2, o.dtype, ranks));
}

// The U-Net operators (upsample, norms, cat, activations, losses).
void check_nn(const Options& o, const GlobalTensors& g, int ranks, std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const Shape& x = g.input.shape();
  const bool bwd = o.backward;
  const DType dt = o.dtype;
  if (o.op == OpKind::Upsample) {
    const RefUpsample p = ref_upsample(o);
    const bool linear = p.linear;
    const Int nsp = o.spatial_dims();
    // Outputs reading one input (per dim at most 2 ceil(O / L) + 2).
    const Shape y = ref_upsample_output_shape(x, p);
    Int readers = 1;
    for (Int i = 0; i < nsp; ++i) {
      const auto s = static_cast<std::size_t>(2 + i);
      readers *= 2 * ((y[s] + x[s] - 1) / x[s]) + 2;
    }
    out.push_back(compare("output", g.output, ref_upsample_forward(g.input, p), Int{1} << nsp, dt,
                          ranks, /*exact=*/!linear));
    if (bwd)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_upsample_grad_input(g.grad_output, x, p), readers, dt, ranks));
    return;
  }
  if (o.is_norm()) {
    const RefNorm p = ref_norm(o);
    const RefNormForward f =
        ref_norm_forward(g.input, g.weight, g.bias, g.running_mean, g.running_var, p);
    const Int set = ref_norm_set_size(x, p);
    const double amp = std::max(1.0, f.max_invstd);
    out.push_back(compare("output", g.output, f.output, set + 2, dt, ranks, false, amp));
    if (o.has_running_stats()) {
      out.push_back(
          compare("running_mean_out", g.running_mean_out, f.running_mean, set + 2, dt, ranks));
      out.push_back(
          compare("running_var_out", g.running_var_out, f.running_var, set + 2, dt, ranks));
    }
    if (!bwd) return;
    const RefNormGrads r =
        ref_norm_backward(g.grad_output, g.input, g.weight, g.running_mean, g.running_var, p);
    const Int params = shape_numel(ref_norm_param_shape(x, p));
    const Int per_param = std::max<Int>(g.input.numel() / std::max<Int>(params, 1), 1);
    out.push_back(
        compare("grad_input", g.grad_input, r.grad_input, set + 2, dt, ranks, false, amp * amp));
    if (o.affine) {
      out.push_back(
          compare("grad_weight", g.grad_weight, r.grad_weight, per_param, dt, ranks, false, amp));
      out.push_back(compare("grad_bias", g.grad_bias, r.grad_bias, per_param, dt, ranks));
    }
    return;
  }
  if (o.op == OpKind::Cat) {
    std::vector<Tensor> all{g.input};
    all.insert(all.end(), g.more_inputs.begin(), g.more_inputs.end());
    out.push_back(compare("output", g.output, ref_cat(all, o.cat_dim), 1, dt, ranks, true));
    if (!bwd) return;
    std::vector<Shape> shapes;
    for (const auto& t : all)
      shapes.push_back(t.shape());
    const std::vector<Tensor> pieces = ref_cat_grad(g.grad_output, shapes, o.cat_dim);
    out.push_back(compare("grad_input", g.grad_input, pieces[0], 1, dt, ranks, true));
    for (std::size_t k = 1; k < pieces.size(); ++k)
      out.push_back(
          compare("grad_input" + std::to_string(k),
                  k - 1 < g.grad_more_inputs.size() ? g.grad_more_inputs[k - 1] : Tensor(),
                  pieces[k], 1, dt, ranks, true));
    return;
  }
  if (o.is_activation()) {
    const RefActivation a = ref_activation(o);
    // relu and leaky_relu are a selection and a product; the others a few
    // transcendental operations.
    out.push_back(compare("output", g.output, ref_activation_forward(g.input, a, o.negative_slope),
                          4, dt, ranks));
    if (bwd)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_activation_grad_input(g.grad_output, g.input, a, o.negative_slope),
                            4, dt, ranks));
    return;
  }
  if (o.op == OpKind::Linear) {
    const Int in = x.back(), K = o.out_features;
    const Int rows = prod_from(Shape(x.begin(), x.end() - 1), 0);
    out.push_back(
        compare("output", g.output, ref_linear(g.input, g.weight, g.bias), in + 1, dt, ranks));
    if (!bwd) return;
    const RefLinearGrads r = ref_linear_backward(g.grad_output, g.input, g.weight);
    out.push_back(compare("grad_input", g.grad_input, r.grad_input, K, dt, ranks));
    out.push_back(compare("grad_weight", g.grad_weight, r.grad_weight, rows, dt, ranks));
    if (o.bias) out.push_back(compare("grad_bias", g.grad_bias, r.grad_bias, rows, dt, ranks));
    return;
  }
  if (o.op == OpKind::Dropout) {
    // The mask is the documented function of (seed, index): exact but for
    // the one product by 1 / (1 - p).
    const std::uint64_t seed = dropout_seed(o.seed);
    out.push_back(compare("output", g.output, ref_dropout(g.input, o.p, seed, 0), 1, dt, ranks));
    if (bwd)
      out.push_back(compare("grad_input", g.grad_input, ref_dropout(g.grad_output, o.p, seed, 0), 1,
                            dt, ranks));
    return;
  }
  if (o.is_pointwise_loss()) {
    const bool mean = o.reduction == LossReduction::Mean;
    const RefPointwiseLoss l = o.op == OpKind::L1Loss         ? RefPointwiseLoss::L1
                               : o.op == OpKind::SmoothL1Loss ? RefPointwiseLoss::SmoothL1
                               : o.op == OpKind::HuberLoss    ? RefPointwiseLoss::Huber
                                                              : RefPointwiseLoss::BceWithLogits;
    const double param = o.op == OpKind::HuberLoss ? o.delta : o.beta;
    out.push_back(compare("output", g.output, ref_pointwise_loss(l, g.input, g.target, mean, param),
                          g.input.numel() + 1, dt, ranks));
    if (bwd)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_pointwise_loss_grad_input(l, g.input, g.target, mean, param), 4, dt,
                            ranks));
    return;
  }
  if (o.op == OpKind::CrossEntropy) {
    check_cross_entropy(o, g, ranks, out);
    return;
  }
  if (o.is_loss()) {
    const bool mean = o.reduction == LossReduction::Mean;
    const bool mse = o.op == OpKind::MseLoss;
    out.push_back(compare(
        "output", g.output,
        mse ? ref_mse_loss(g.input, g.target, mean) : ref_cross_entropy(g.input, g.target, mean),
        g.input.numel() + 1, dt, ranks));
    if (bwd)
      out.push_back(compare("grad_input", g.grad_input,
                            mse ? ref_mse_loss_grad_input(g.input, g.target, mean)
                                : ref_cross_entropy_grad_input(g.input, g.target, mean),
                            mse ? 2 : x[1] + 2, dt, ranks));
  }
}

}  // namespace

std::vector<TensorCheck> check_against_reference(const Options& o, const GlobalTensors& g,
                                                 int ranks) {
  using namespace dtensor::reference;
  std::vector<TensorCheck> out;
  if (o.is_binary() || o.is_unary()) {
    check_tensor_api(o, g, ranks, out);
    return out;
  }
  if (o.is_view()) {
    check_view(o, g, ranks, out);
    return out;
  }
  if (o.is_reduction() || o.is_softmax()) {
    check_reductions(o, g, ranks, out);
    return out;
  }
  if (!o.is_window()) {
    check_nn(o, g, ranks, out);
    return out;
  }
  const Shape& x = g.input.shape();
  const Int ksize = prod_from(Shape(o.kernel.begin(), o.kernel.end()), 0);
  const bool bwd = o.backward;
  switch (o.op) {
    case OpKind::Conv: {
      const ConvParams p = o.conv_params();
      const Shape& w = g.weight.shape();
      out.push_back(compare("output", g.output,
                            ref_conv_padding_mode_forward(g.input, g.weight, g.bias, p),
                            w[1] * ksize + (o.bias ? 1 : 0), o.dtype, ranks));
      if (!bwd) break;
      const Int per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
      out.push_back(compare("grad_input", g.grad_input,
                            ref_conv_padding_mode_grad_input(g.grad_output, g.weight, x, p),
                            (w[0] / o.groups) * ksize, o.dtype, ranks));
      out.push_back(compare("grad_weight", g.grad_weight,
                            ref_conv_padding_mode_grad_weight(g.grad_output, g.input, w, p),
                            per_output, o.dtype, ranks));
      if (o.bias)
        out.push_back(compare("grad_bias", g.grad_bias, ref_conv_grad_bias(g.grad_output),
                              per_output, o.dtype, ranks));
      break;
    }
    case OpKind::ConvTranspose: {
      const ConvTransposeParams p = o.conv_transpose_params();
      const Shape& w = g.weight.shape();  // [C, K/g, k...]
      out.push_back(compare("output", g.output,
                            ref_conv_transpose_forward(g.input, g.weight, g.bias, p),
                            (w[0] / o.groups) * ksize + (o.bias ? 1 : 0), o.dtype, ranks));
      if (!bwd) break;
      const Int per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
      out.push_back(compare("grad_input", g.grad_input,
                            ref_conv_transpose_grad_input(g.grad_output, g.weight, x, p),
                            w[1] * ksize, o.dtype, ranks));
      out.push_back(compare("grad_weight", g.grad_weight,
                            ref_conv_transpose_grad_weight(g.grad_output, g.input, w, p),
                            x[0] * prod_from(x, 2), o.dtype, ranks));
      if (o.bias)
        out.push_back(compare("grad_bias", g.grad_bias, ref_conv_transpose_grad_bias(g.grad_output),
                              per_output, o.dtype, ranks));
      break;
    }
    case OpKind::MaxPool: {
      const PoolParams p = o.pool_params();
      out.push_back(compare("output", g.output, ref_max_pool_forward(g.input, p), 1, o.dtype, ranks,
                            /*exact=*/true));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_max_pool_grad_input(g.grad_output, g.input, p), ksize, o.dtype,
                              ranks));
      break;
    }
    case OpKind::AvgPool: {
      const PoolParams p = o.pool_params();
      out.push_back(
          compare("output", g.output, ref_avg_pool_forward(g.input, p), ksize + 1, o.dtype, ranks));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_avg_pool_grad_input(g.grad_output, x, p), ksize + 1, o.dtype,
                              ranks));
      break;
    }
    case OpKind::AdaptiveAvgPool:
      out.push_back(compare("output", g.output,
                            ref_adaptive_avg_pool_forward(g.input, o.output_size),
                            adaptive_terms(o) + 1, o.dtype, ranks));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_adaptive_avg_pool_grad_input(g.grad_output, x, o.output_size),
                              adaptive_terms(o) + 1, o.dtype, ranks));
      break;
    case OpKind::AdaptiveMaxPool:
      out.push_back(compare("output", g.output,
                            ref_adaptive_max_pool_forward(g.input, o.output_size), 1, o.dtype,
                            ranks, /*exact=*/true));
      if (bwd)
        out.push_back(
            compare("grad_input", g.grad_input,
                    ref_adaptive_max_pool_grad_input(g.grad_output, g.input, o.output_size),
                    adaptive_terms(o), o.dtype, ranks));
      break;
    case OpKind::Pad: {
      // The padding value as the run's dtype stores it.
      const double value = Tensor::full({1}, o.value, o.dtype).item({0});
      out.push_back(compare("output", g.output, ref_pad_forward(g.input, o.padding, o.mode, value),
                            1, o.dtype, ranks));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_pad_grad_input(g.grad_output, x, o.padding, o.mode), pad_terms(o),
                              o.dtype, ranks));
      break;
    }
    default:
      break;
  }
  return out;
}

}  // namespace dtensor::op_cli
