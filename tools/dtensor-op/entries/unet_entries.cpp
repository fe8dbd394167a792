// The U-Net operators' rows: upsample, the normalisations, cat, the
// activations, dropout and linear.
#include <algorithm>
#include <cmath>

#include "dtensor/ops/activations.h"
#include "dtensor/ops/cat.h"
#include "dtensor/ops/dropout.h"
#include "dtensor/ops/linear.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/upsample.h"
#include "tools/dtensor-op/entries/entry_helpers.h"
#include "tools/reference/reference_nn_ops.h"

namespace dtensor::op_cli::entries {
namespace {

// ---- upsample ----

// floor(L * scale_factor), as PyTorch (in double).
Int upsample_length(Int L, double scale) {
  return static_cast<Int>(std::floor(static_cast<double>(L) * scale));
}

reference::RefUpsample ref_upsample(const Options& o) {
  reference::RefUpsample p;
  p.linear = o.upsample_mode == UpsampleMode::Linear;
  p.size = o.size;
  p.scale_factor = o.scale;
  p.align_corners = o.align_corners;
  return p;
}

OpEntry upsample_entry() {
  OpEntry e{OpKind::Upsample, "upsample", Family::Upsample};
  e.options = {"--mode", "--size", "--scale", "--align-corners"};
  e.needs_spatial = true;
  e.check = [](const Options& o, const std::string&) {
    for (Int i = 0; i < o.spatial_dims(); ++i) {
      const auto s = static_cast<std::size_t>(i);
      if (!o.scale.empty() && upsample_length(o.input[2 + s], o.scale[s]) < 1)
        fail("--scale", fmt::format("{} in dim {} (length {}) leaves an empty output "
                                    "(floor({} * {}) = 0)",
                                    o.scale[s], i, o.input[2 + s], o.input[2 + s], o.scale[s]));
    }
  };
  e.check_with_library = [](const Options& o) {
    upsample_output_shape(o.input, o.upsample_params());
  };
  e.output_shape = [](const Options& o) {
    Shape out{o.input[0], o.input[1]};
    for (std::size_t s = 0; s < static_cast<std::size_t>(o.spatial_dims()); ++s)
      out.push_back(!o.size.empty() ? o.size[s] : upsample_length(o.input[2 + s], o.scale[s]));
    return out;
  };
  e.params_line = [](const Options& o) {
    std::string scale;
    for (double v : o.scale)
      scale += fmt::format("{}{}", scale.empty() ? "" : ", ", v);
    return fmt::format("mode={} {} align_corners={}", upsample_mode_name(o.upsample_mode),
                       o.size.empty() ? "scale_factor=[" + scale + "]" : "size=" + list(o.size),
                       o.align_corners);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["mode"] = std::string(upsample_mode_name(o.upsample_mode));
    meta["size"] = o.size.empty() ? json(nullptr) : json(o.size);
    meta["scale_factor"] = o.scale.empty() ? json(nullptr) : json(o.scale);
    meta["align_corners"] = o.align_corners;
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(upsample(ops.input, o.upsample_params()));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(upsample_backward(gy.value(), ops.input, o.upsample_params()));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const Shape& x = g.input.shape();
    const RefUpsample p = ref_upsample(o);
    const Int nsp = o.spatial_dims();
    // Outputs reading one input (per dim at most 2 ceil(O / L) + 2).
    const Shape y = ref_upsample_output_shape(x, p);
    Int readers = 1;
    for (Int i = 0; i < nsp; ++i) {
      const auto s = static_cast<std::size_t>(2 + i);
      readers *= 2 * ((y[s] + x[s] - 1) / x[s]) + 2;
    }
    out.push_back(compare("output", g.output, ref_upsample_forward(g.input, p), Int{1} << nsp,
                          o.dtype, ranks, /*exact=*/!p.linear));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_upsample_grad_input(g.grad_output, x, p), readers, o.dtype, ranks));
  };
  return e;
}

// ---- the normalisations ----

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

void norm_reference(const Options& o, const GlobalTensors& g, int ranks,
                    std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const Shape& x = g.input.shape();
  const DType dt = o.dtype;
  const RefNorm p = ref_norm(o);
  const RefNormForward f =
      ref_norm_forward(g.input, g.weight, g.bias, g.running_mean, g.running_var, p);
  const Int set = ref_norm_set_size(x, p);
  const double amp = std::max(1.0, f.max_invstd);
  out.push_back(compare("output", g.output, f.output, set + 2, dt, ranks, false, amp));
  if (o.has_running_stats()) {
    out.push_back(
        compare("running_mean_out", g.running_mean_out, f.running_mean, set + 2, dt, ranks));
    out.push_back(compare("running_var_out", g.running_var_out, f.running_var, set + 2, dt, ranks));
  }
  if (!o.backward) return;
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
}

// eps, (momentum, training), affine and the weight's shape, in meta.json's order.
void norm_meta(json& meta, const Options& o) {
  if (o.op == OpKind::GroupNorm) meta["num_groups"] = o.num_groups;
  if (o.op == OpKind::LayerNorm)
    meta["normalized_shape"] = Shape(o.input.begin() + 1, o.input.end());
  meta["eps"] = o.eps;
  if (o.op == OpKind::BatchNorm) {
    meta["momentum"] = o.momentum;
    meta["training"] = o.training;
  }
  meta["affine"] = o.affine;
  meta["weight_shape"] = o.affine ? json(o.weight_shape()) : json(nullptr);
}

Grads norm_grads(const Options& o, NormGrads r) {
  Grads g;
  g.grad_input = std::move(r.grad_input);
  if (o.affine) {
    g.grad_weight = std::move(r.grad_weight);
    g.grad_bias = std::move(r.grad_bias);
  }
  return g;
}

NormOutputMask norm_mask(const Options& o) {
  return {true, o.affine, o.affine};
}

OpEntry norm_entry(OpKind kind, std::string_view name) {
  OpEntry e{kind, name, Family::Norm};
  e.options = {"--eps", "--no-affine"};
  e.weight = WeightKind::WhenAffine;
  e.meta = norm_meta;
  e.reference = norm_reference;
  e.params_line = [](const Options& o) { return fmt::format("eps={} affine={}", o.eps, o.affine); };
  return e;
}

OpEntry batch_norm_entry() {
  OpEntry e = norm_entry(OpKind::BatchNorm, "batch_norm");
  e.options.insert(e.options.end(), {"--momentum", "--eval"});
  e.check = [](const Options& o, const std::string&) {
    Int per_channel = o.input[0];
    for (Int i = 0; i < o.spatial_dims(); ++i)
      per_channel *= o.input[2 + static_cast<std::size_t>(i)];
    if (o.training && per_channel == 1)
      fail("--input",
           "batch_norm in training needs more than one value per channel (N * "
           "spatial > 1), as PyTorch; give a larger input or --eval");
  };
  e.params_line = [](const Options& o) {
    return fmt::format("eps={} momentum={} affine={} training={}", o.eps, o.momentum, o.affine,
                       o.training);
  };
  e.forward = [](const Options& o, const Operands& ops) {
    BatchNormResult r = batch_norm(ops.input, ops.weight, ops.bias, ops.running_mean,
                                   ops.running_var, o.training, o.momentum, o.eps);
    return Forward(std::move(r.output), std::move(r.running_mean), std::move(r.running_var));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return norm_grads(o, batch_norm_backward(gy.value(), ops.input, ops.weight, ops.running_mean,
                                             ops.running_var, o.training, o.eps, norm_mask(o)));
  };
  return e;
}

OpEntry group_norm_entry() {
  OpEntry e = norm_entry(OpKind::GroupNorm, "group_norm");
  e.options.insert(e.options.begin(), "--num-groups");
  e.check = [](const Options& o, const std::string&) {
    const Int C = o.input[1];
    if (C % o.num_groups != 0)
      fail("--num-groups",
           fmt::format("{} does not divide the {} input channels (--input)", o.num_groups, C));
    // PyTorch's F.group_norm: _verify_batch_size([N * C / G, G, spatial...]).
    Int size_prods = o.input[0] * (C / o.num_groups);
    for (Int i = 0; i < o.spatial_dims(); ++i)
      size_prods *= o.input[2 + static_cast<std::size_t>(i)];
    if (size_prods == 1)
      fail("--input",
           "group_norm with one value per group and a batch of 1 is rejected by "
           "PyTorch (\"Expected more than 1 value per channel when training\")");
  };
  e.params_line = [](const Options& o) {
    return fmt::format("num_groups={} eps={} affine={}", o.num_groups, o.eps, o.affine);
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(group_norm(ops.input, o.num_groups, ops.weight, ops.bias, o.eps));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return norm_grads(o, group_norm_backward(gy.value(), ops.input, o.num_groups, ops.weight, o.eps,
                                             norm_mask(o)));
  };
  return e;
}

OpEntry instance_norm_entry() {
  OpEntry e = norm_entry(OpKind::InstanceNorm, "instance_norm");
  e.needs_spatial = true;
  e.check = [](const Options& o, const std::string&) {
    Int per_instance = 1;
    for (Int i = 0; i < o.spatial_dims(); ++i)
      per_instance *= o.input[2 + static_cast<std::size_t>(i)];
    if (per_instance == 1)
      fail("--input", "instance_norm needs more than one spatial element, as PyTorch");
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(instance_norm(ops.input, ops.weight, ops.bias, o.eps));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return norm_grads(
        o, instance_norm_backward(gy.value(), ops.input, ops.weight, o.eps, norm_mask(o)));
  };
  return e;
}

OpEntry layer_norm_entry() {
  OpEntry e = norm_entry(OpKind::LayerNorm, "layer_norm");
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(layer_norm(ops.input, ops.weight, ops.bias, o.eps));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return norm_grads(o,
                      layer_norm_backward(gy.value(), ops.input, ops.weight, o.eps, norm_mask(o)));
  };
  return e;
}

// ---- cat ----

std::vector<DTensor> all_inputs(const Operands& ops) {
  std::vector<DTensor> all{ops.input};
  all.insert(all.end(), ops.more_inputs.begin(), ops.more_inputs.end());
  return all;
}

OpEntry cat_entry() {
  OpEntry e{OpKind::Cat, "cat", Family::Cat};
  e.options = {"--inputs", "--channels", "--cat-dim"};
  e.output_shape = [](const Options& o) {
    Shape out = o.input;
    const auto d = static_cast<std::size_t>(o.cat_dim);
    out[d] = 0;
    for (Int k = 0; k < o.inputs; ++k)
      out[d] += o.input_shape(k)[d];
    return out;
  };
  e.params_line = [](const Options& o) {
    return fmt::format("inputs={} channels={} cat_dim={}", o.inputs, list(o.channels), o.cat_dim);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["inputs"] = o.inputs;
    meta["channels"] = o.channels;
    meta["cat_dim"] = o.cat_dim;
    json shapes = json::array();
    for (Int k = 0; k < o.inputs; ++k)
      shapes.push_back(o.input_shape(k));
    meta["input_shapes"] = shapes;
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(cat(all_inputs(ops), o.cat_dim));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    Grads g;
    std::vector<DTensor> pieces = cat_backward(gy.value(), all_inputs(ops), o.cat_dim);
    if (!pieces.empty()) g.grad_input = pieces[0];
    for (std::size_t k = 1; k < pieces.size(); ++k)
      g.grad_more_inputs.push_back(pieces[k]);
    return g;
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const DType dt = o.dtype;
    std::vector<Tensor> all{g.input};
    all.insert(all.end(), g.more_inputs.begin(), g.more_inputs.end());
    out.push_back(compare("output", g.output, ref_cat(all, o.cat_dim), 1, dt, ranks, true));
    if (!o.backward) return;
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
  };
  return e;
}

// ---- the activations ----

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

// relu and leaky_relu are a selection and a product; the others a few
// transcendental operations.
void activation_reference(const Options& o, const GlobalTensors& g, int ranks,
                          std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const RefActivation a = ref_activation(o);
  out.push_back(compare("output", g.output, ref_activation_forward(g.input, a, o.negative_slope), 4,
                        o.dtype, ranks));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_activation_grad_input(g.grad_output, g.input, a, o.negative_slope), 4,
                          o.dtype, ranks));
}

OpEntry activation_entry(OpKind kind, std::string_view name) {
  OpEntry e{kind, name, Family::Activation};
  e.params_line = no_parameters;
  e.reference = activation_reference;
  return e;
}

std::vector<OpEntry> activation_entries() {
  std::vector<OpEntry> out;
  OpEntry e = activation_entry(OpKind::LeakyRelu, "leaky_relu");
  e.options = {"--negative-slope"};
  e.params_line = [](const Options& o) {
    return fmt::format("negative_slope={}", o.negative_slope);
  };
  e.meta = [](json& meta, const Options& o) { meta["negative_slope"] = o.negative_slope; };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(leaky_relu(ops.input, o.negative_slope));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(leaky_relu_backward(gy.value(), ops.input, o.negative_slope));
  };
  out.push_back(e);

  e = activation_entry(OpKind::Gelu, "gelu");
  e.options = {"--approximate"};
  e.params_line = [](const Options& o) {
    return fmt::format("approximate={}", gelu_approximate_name(o.approximate));
  };
  e.meta = [](json& meta, const Options& o) {
    meta["approximate"] = std::string(gelu_approximate_name(o.approximate));
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(gelu(ops.input, o.approximate));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(gelu_backward(gy.value(), ops.input, o.approximate));
  };
  out.push_back(e);

  e = activation_entry(OpKind::Silu, "silu");
  e.forward = [](const Options&, const Operands& ops) { return Forward(silu(ops.input)); };
  e.backward = [](const Options&, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(silu_backward(gy.value(), ops.input));
  };
  out.push_back(e);

  e = activation_entry(OpKind::Sigmoid, "sigmoid");
  e.forward = [](const Options&, const Operands& ops) {
    return Forward(dtensor::sigmoid(ops.input));
  };
  e.backward = [](const Options&, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(sigmoid_backward(gy.value(), ops.input));
  };
  out.push_back(e);

  e = activation_entry(OpKind::Tanh, "tanh");
  e.forward = [](const Options&, const Operands& ops) { return Forward(dtensor::tanh(ops.input)); };
  e.backward = [](const Options&, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(tanh_backward(gy.value(), ops.input));
  };
  out.push_back(e);

  e = activation_entry(OpKind::Relu, "relu");
  e.forward = [](const Options&, const Operands& ops) { return Forward(relu(ops.input)); };
  e.backward = [](const Options&, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(relu_backward(gy.value(), ops.input));
  };
  out.push_back(e);
  return out;
}

// ---- dropout and linear ----

OpEntry dropout_entry() {
  OpEntry e{OpKind::Dropout, "dropout", Family::Dropout};
  e.options = {"--p"};
  e.params_line = [](const Options& o) { return fmt::format("p={} training=true", o.p); };
  e.meta = [](json& meta, const Options& o) { meta["p"] = o.p; };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(dropout(ops.input, o.p, dropout_seed(o.seed), 0));
  };
  e.backward = [](const Options& o, const Operands&, const std::optional<DTensor>& gy) {
    return input_grad(dropout_backward(gy.value(), o.p, dropout_seed(o.seed), 0));
  };
  // The mask is the documented function of (seed, index): exact but for
  // the one product by 1 / (1 - p).
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const std::uint64_t seed = dropout_seed(o.seed);
    out.push_back(
        compare("output", g.output, ref_dropout(g.input, o.p, seed, 0), 1, o.dtype, ranks));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input, ref_dropout(g.grad_output, o.p, seed, 0), 1,
                            o.dtype, ranks));
  };
  return e;
}

OpEntry linear_entry() {
  OpEntry e{OpKind::Linear, "linear", Family::Linear};
  e.options = {"--no-bias", "--out-features"};
  e.weight = WeightKind::Always;
  e.output_shape = [](const Options& o) {
    Shape out = o.input;
    out.back() = o.out_features;
    return out;
  };
  e.params_line = [](const Options& o) {
    return fmt::format("out_features={} bias={}", o.out_features, o.bias);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["out_features"] = o.out_features;
    meta["bias"] = o.bias;
    meta["weight_shape"] = o.weight_shape();
  };
  e.forward = [](const Options&, const Operands& ops) {
    return Forward(linear(ops.input, *ops.weight, ops.bias));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    LinearGrads r = linear_backward(gy.value(), ops.input, *ops.weight, o.bias);
    Grads g;
    g.grad_input = std::move(r.grad_input);
    g.grad_weight = std::move(r.grad_weight);
    g.grad_bias = std::move(r.grad_bias);
    return g;
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const Shape& x = g.input.shape();
    const Int in = x.back(), K = o.out_features;
    const Int rows = prod_from(Shape(x.begin(), x.end() - 1), 0);
    const DType dt = o.dtype;
    out.push_back(
        compare("output", g.output, ref_linear(g.input, g.weight, g.bias), in + 1, dt, ranks));
    if (!o.backward) return;
    const RefLinearGrads r = ref_linear_backward(g.grad_output, g.input, g.weight);
    out.push_back(compare("grad_input", g.grad_input, r.grad_input, K, dt, ranks));
    out.push_back(compare("grad_weight", g.grad_weight, r.grad_weight, rows, dt, ranks));
    if (o.bias) out.push_back(compare("grad_bias", g.grad_bias, r.grad_bias, rows, dt, ranks));
  };
  return e;
}

}  // namespace
}  // namespace dtensor::op_cli::entries

namespace dtensor::op_cli {

std::vector<OpEntry> unet_entries() {
  using namespace entries;
  std::vector<OpEntry> out{upsample_entry(),      batch_norm_entry(), group_norm_entry(),
                           instance_norm_entry(), layer_norm_entry(), cat_entry()};
  for (auto& e : activation_entries())
    out.push_back(std::move(e));
  out.push_back(dropout_entry());
  out.push_back(linear_entry());
  return out;
}

}  // namespace dtensor::op_cli
