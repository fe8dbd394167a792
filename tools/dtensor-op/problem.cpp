#include "tools/dtensor-op/problem.h"

#include <algorithm>

#include "dtensor/ops/activations.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/cat.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dropout.h"
#include "dtensor/ops/linear.h"
#include "dtensor/ops/losses.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/reductions.h"
#include "dtensor/ops/unary.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/views.h"
#include "dtensor/ops/window_ops.h"
#include "tools/reference/reference_nn_ops.h"

namespace dtensor::op_cli {
namespace {

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<std::size_t>(mesh.ndim()), Placement::replicate());
}

// 1 + t / 2 of an f64 tensor, in `dtype`: rand moved to [0.5, 1.5).
Tensor positive(Tensor t, DType dtype) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = 1.0 + t.data<double>()[i] / 2.0;
  return t.to(dtype);
}

// This rank's part of rand(shape, seed) under `spec` (moved to [0.5, 1.5)
// when `pos`); zeros on the non-zero indices of Partial mesh dims (as
// dtensor-conv).
Tensor seeded_local(const DTensorSpec& spec, std::uint64_t seed, bool pos = false) {
  const auto& coord = spec.mesh().get_coordinate();
  if (coord)
    for (std::size_t i = 0; i < spec.placements().size(); ++i)
      if (spec.placements()[i].is_partial() && (*coord)[i] != 0)
        return Tensor::zeros(spec.local_shape(), spec.dtype());
  if (pos)
    return positive(Tensor::rand_slice(spec.shape(), spec.global_offset(), spec.local_shape(),
                                       DType::F64, seed),
                    spec.dtype());
  return Tensor::rand_slice(spec.shape(), spec.global_offset(), spec.local_shape(), spec.dtype(),
                            seed);
}

DTensor seeded(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
               DType dtype, std::uint64_t seed, bool pos = false) {
  DTensorSpec spec(mesh, placements, shape, dtype);
  Tensor local = seeded_local(spec, seed, pos).to(mesh.device());
  return DTensor(std::move(local), std::move(spec));
}

std::uint64_t other_seed(const Seeds& seeds) {
  return derived_seed(seeds.input, 301);
}

// The whole input: rand, or 1 + rand / 2 for the ops that need it positive.
Tensor whole_input(const Options& o, const Seeds& seeds) {
  if (o.positive_input()) return positive(Tensor::rand(o.input, DType::F64, seeds.input), o.dtype);
  return Tensor::rand(o.input_shape(0), o.dtype, seeds.input);
}

// The tensor API's forward (element-wise operators, reductions, softmax):
// the input (and the other operand) to the output.
DTensor tensor_api_forward(const Options& o, const DTensor& x, const std::optional<DTensor>& b) {
  switch (o.op) {
    case OpKind::Add:
      return add(x, *b);
    case OpKind::Sub:
      return sub(x, *b);
    case OpKind::Mul:
      return mul(x, *b);
    case OpKind::Div:
      return div(x, *b);
    case OpKind::Maximum:
      return maximum(x, *b);
    case OpKind::Minimum:
      return minimum(x, *b);
    case OpKind::Exp:
      return dtensor::exp(x);
    case OpKind::Log:
      return natural_log(x);
    case OpKind::Sqrt:
      return dtensor::sqrt(x);
    case OpKind::Rsqrt:
      return rsqrt(x);
    case OpKind::Neg:
      return neg(x);
    case OpKind::Abs:
      return dtensor::abs(x);
    case OpKind::Square:
      return square(x);
    case OpKind::Clamp:
      return clamp(x, o.min, o.max);
    case OpKind::Pow:
      return dtensor::pow(x, o.exponent);
    case OpKind::Sum:
      return sum(x, o.dims, o.keepdim);
    case OpKind::Mean:
      return mean(x, o.dims, o.keepdim);
    case OpKind::Amax:
      return amax(x, o.dims, o.keepdim);
    case OpKind::Amin:
      return amin(x, o.dims, o.keepdim);
    case OpKind::Var:
      return var(x, o.dims, o.correction, o.keepdim);
    case OpKind::Softmax:
      return softmax(x, o.dim);
    case OpKind::LogSoftmax:
      return log_softmax(x, o.dim);
    default:
      throw std::logic_error("dtensor-op: not a tensor API op");
  }
}

// The shape operators' forward, with the options resolved by the parser.
DTensor view_forward(const Options& o, const DTensor& x) {
  switch (o.op) {
    case OpKind::Reshape:
      return reshape(x, o.shape);
    case OpKind::Permute:
      return permute(x, o.order);
    case OpKind::Transpose:
      return transpose(x, o.dim0, o.dim1);
    case OpKind::Flatten:
      return flatten(x, o.start_dim, o.end_dim);
    case OpKind::Narrow:
      return narrow(x, o.dim, o.start, o.length);
    default:
      throw std::logic_error("dtensor-op: not a shape operator");
  }
}

DTensor whole_on(const DeviceMesh& mesh, const Tensor& t) {
  return DTensor(t, DTensorSpec(mesh, replicated(mesh), t.shape(), t.dtype()));
}

// This rank's part of the whole tensor `whole` under (mesh, placements), as
// seeded() places a seeded one (zeros on the non-zero indices of Partial dims).
DTensor sliced(const DeviceMesh& mesh, const Placements& placements, const Tensor& whole) {
  DTensorSpec spec(mesh, placements, whole.shape(), whole.dtype());
  const auto& coord = spec.mesh().get_coordinate();
  bool zero = false;
  if (coord)
    for (std::size_t i = 0; i < placements.size(); ++i)
      zero = zero || (placements[i].is_partial() && (*coord)[i] != 0);
  Tensor local;
  if (zero) {
    local = Tensor::zeros(spec.local_shape(), whole.dtype());
  } else {
    local = whole;
    const Shape offset = spec.global_offset(), shape = spec.local_shape();
    for (std::size_t d = 0; d < shape.size(); ++d)
      local = local.narrow(static_cast<std::int64_t>(d), offset[d], shape[d]);
    local = local.clone();
  }
  return DTensor(local.to(mesh.device()), std::move(spec));
}

bool is_conv(const Options& o) {
  return o.op == OpKind::Conv;
}

std::uint64_t input_seed(const Seeds& seeds, std::int64_t k) {
  return k == 0 ? seeds.input : derived_seed(seeds.input, static_cast<std::uint64_t>(k));
}

// The whole running statistics, in the run's dtype: mean rand, var 1 + rand / 2.
Tensor whole_running_mean(const Options& o, const Seeds& seeds) {
  return Tensor::rand({o.input[1]}, o.dtype, derived_seed(seeds.bias, 101));
}

Tensor whole_running_var(const Options& o, const Seeds& seeds) {
  Tensor v = Tensor::rand({o.input[1]}, DType::F64, derived_seed(seeds.bias, 102));
  for (std::int64_t i = 0; i < v.numel(); ++i)
    v.data<double>()[i] = 1.0 + v.data<double>()[i] / 2.0;
  return v.to(o.dtype);
}

std::uint64_t target_seed(const Seeds& seeds) {
  return derived_seed(seeds.grad_output, 201);
}

// cross_entropy's whole target: class probabilities (softmax over dim 1).
Tensor whole_probabilities(const Options& o, const Seeds& seeds) {
  return reference::ref_softmax_dim1(Tensor::rand(o.input, DType::F64, target_seed(seeds)))
      .to(o.dtype);
}

// cross_entropy's whole target with --target indices: int64 [N, spatial...]
// uniform in [0, C) (from rand, so from the seed alone); when ignore_index
// is no class, element i (the global row-major index) is ignore_index for
// i % 7 == 3, so that ignoring is exercised too (a class ignore_index is hit
// by the draws themselves).
Tensor whole_class_indices(const Options& o, const Seeds& seeds) {
  Shape shape = o.input;
  shape.erase(shape.begin() + 1);
  const std::int64_t C = o.input[1];
  const Tensor u = Tensor::rand(shape, DType::F64, target_seed(seeds));
  Tensor t = Tensor::empty(shape, DType::I64);
  const bool ignore_is_class = o.ignore_index >= 0 && o.ignore_index < C;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const auto c =
        static_cast<std::int64_t>((u.data<double>()[i] + 1.0) / 2.0 * static_cast<double>(C));
    t.data<std::int64_t>()[i] =
        !ignore_is_class && i % 7 == 3 ? o.ignore_index : std::min(c, C - 1);
  }
  return t;
}

// The index target's placements: the input's along its other dims (input
// dim 0 is target dim 0, input dim d >= 2 target dim d - 1); replicated
// where the input is sharded along the classes or Partial.
Placements class_index_placements(const Placements& input) {
  Placements out;
  for (const Placement& p : input)
    out.push_back(p.is_shard() && p.dim() != 1 ? Placement(Shard(p.dim() == 0 ? 0 : p.dim() - 1))
                                               : Placement::replicate());
  return out;
}

CrossEntropyOptions cross_entropy_options(const Options& o) {
  return {o.reduction, o.ignore_index, o.label_smoothing};
}

// The whole target of mse_loss and the pointwise losses: rand, or for
// binary_cross_entropy_with_logits probabilities (1 + rand) / 2 in [0, 1).
Tensor whole_target(const Options& o, const Seeds& seeds) {
  if (o.op != OpKind::BinaryCrossEntropyWithLogits)
    return Tensor::rand(o.input, o.dtype, target_seed(seeds));
  Tensor t = Tensor::rand(o.input, DType::F64, target_seed(seeds));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = (1.0 + t.data<double>()[i]) / 2.0;
  return t.to(o.dtype);
}

}  // namespace

std::uint64_t derived_seed(std::uint64_t base, std::uint64_t which) {
  // splitmix64 of base + which * golden ratio.
  std::uint64_t z = base + which * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t dropout_seed(std::uint64_t seed) {
  return derived_seed(Seeds::from(seed).input, 401);
}

Operands make_operands(const Options& o, const DeviceMesh& mesh, const Seeds& seeds) {
  Operands ops{
      seeded(mesh, o.placements, o.input_shape(0), o.dtype, seeds.input, o.positive_input()),
      std::nullopt,
      std::nullopt,
      {},
      std::nullopt,
      std::nullopt,
      std::nullopt,
      std::nullopt};
  if (o.is_binary())
    ops.other = seeded(mesh, o.other_shape == o.input ? o.placements : replicated(mesh),
                       o.other_shape, o.dtype, other_seed(seeds));
  if (o.has_weight()) {
    ops.weight = seeded(mesh, replicated(mesh), o.weight_shape(), o.dtype, seeds.weight);
    if (o.bias) ops.bias = seeded(mesh, replicated(mesh), o.bias_shape(), o.dtype, seeds.bias);
  }
  for (std::int64_t k = 1; k < o.inputs; ++k)
    ops.more_inputs.push_back(
        seeded(mesh, o.placements, o.input_shape(k), o.dtype, input_seed(seeds, k)));
  if (o.has_running_stats()) {
    ops.running_mean = sliced(mesh, replicated(mesh), whole_running_mean(o, seeds));
    ops.running_var = sliced(mesh, replicated(mesh), whole_running_var(o, seeds));
  }
  if (o.op == OpKind::MseLoss || o.is_pointwise_loss())
    ops.target = sliced(mesh, o.placements, whole_target(o, seeds));
  if (o.op == OpKind::CrossEntropy)
    ops.target = o.class_indices ? sliced(mesh, class_index_placements(o.placements),
                                          whole_class_indices(o, seeds))
                                 : sliced(mesh, o.placements, whole_probabilities(o, seeds));
  return ops;
}

Operands local_operands(const Operands& global, const DeviceMesh& own_mesh) {
  Operands ops{whole_on(own_mesh, global.input.to_local()),
               std::nullopt,
               std::nullopt,
               {},
               std::nullopt,
               std::nullopt,
               std::nullopt,
               std::nullopt};
  if (global.other) {
    // A broadcast (replicated) other: this rank's part of it along the dims
    // where it has the input's extent, as the library shards it for a sharded
    // input; one placed like the input is already this rank's part.
    Tensor t = global.other->to_local();
    const DTensor& in = global.input;
    if (global.other->shape() != in.shape()) {
      const Shape offset = in.spec().global_offset(), shape = in.spec().local_shape();
      const std::size_t off = shape.size() - t.shape().size();
      for (std::size_t k = 0; k < t.shape().size(); ++k)
        if (t.shape()[k] != 1)
          t = t.narrow(static_cast<std::int64_t>(k), offset[off + k], shape[off + k]);
      t = t.contiguous();
    }
    ops.other = whole_on(own_mesh, t);
  }
  if (global.weight) ops.weight = whole_on(own_mesh, global.weight->to_local());
  if (global.bias) ops.bias = whole_on(own_mesh, global.bias->to_local());
  // layer_norm's [C, spatial...] parameters: this rank's part of them, as the
  // library slices a replicated weight for a sharded input.
  const auto& x = global.input;
  if (global.weight && global.weight->ndim() + 1 == x.ndim() && global.weight->ndim() > 1) {
    const Shape offset = x.spec().global_offset(), shape = x.spec().local_shape();
    for (auto* p : {&ops.weight, &ops.bias}) {
      if (!*p) continue;
      Tensor t = (*p)->to_local();
      for (std::size_t d = 0; d + 1 < shape.size(); ++d)
        t = t.narrow(static_cast<std::int64_t>(d), offset[d + 1], shape[d + 1]);
      *p = whole_on(own_mesh, t.contiguous());
    }
  }
  for (const auto& t : global.more_inputs)
    ops.more_inputs.push_back(whole_on(own_mesh, t.to_local()));
  if (global.running_mean) ops.running_mean = whole_on(own_mesh, global.running_mean->to_local());
  if (global.running_var) ops.running_var = whole_on(own_mesh, global.running_var->to_local());
  if (global.target) ops.target = whole_on(own_mesh, global.target->to_local());
  return ops;
}

DTensor make_grad_output(const Options& o, const DTensor& output, const Seeds& seeds) {
  Placements placements = output.placements();
  for (auto& p : placements)
    if (p.is_partial()) p = Placement::replicate();
  return seeded(output.mesh(), placements, output.shape(), o.dtype, seeds.grad_output);
}

Forward run_forward(const Options& o, const Operands& ops) {
  const DTensor& x = ops.input;
  if (o.is_binary() || o.is_unary() || o.is_reduction() || o.is_softmax())
    return {tensor_api_forward(o, x, ops.other)};
  if (o.is_view()) return {view_forward(o, x)};
  switch (o.op) {
    case OpKind::Conv:
      return {convolution(x, *ops.weight, ops.bias, o.conv_params())};
    case OpKind::ConvTranspose:
      return {conv_transpose(x, *ops.weight, ops.bias, o.conv_transpose_params())};
    case OpKind::MaxPool:
      return {max_pool(x, o.pool_params())};
    case OpKind::AvgPool:
      return {avg_pool(x, o.pool_params())};
    case OpKind::AdaptiveAvgPool:
      return {adaptive_avg_pool(x, o.output_size)};
    case OpKind::AdaptiveMaxPool:
      return {adaptive_max_pool(x, o.output_size)};
    case OpKind::Pad:
      return {pad(x, o.padding, o.mode, o.value)};
    case OpKind::Upsample:
      return {upsample(x, o.upsample_params())};
    case OpKind::BatchNorm: {
      BatchNormResult r = batch_norm(x, ops.weight, ops.bias, ops.running_mean, ops.running_var,
                                     o.training, o.momentum, o.eps);
      return {std::move(r.output), std::move(r.running_mean), std::move(r.running_var)};
    }
    case OpKind::GroupNorm:
      return {group_norm(x, o.num_groups, ops.weight, ops.bias, o.eps)};
    case OpKind::InstanceNorm:
      return {instance_norm(x, ops.weight, ops.bias, o.eps)};
    case OpKind::LayerNorm:
      return {layer_norm(x, ops.weight, ops.bias, o.eps)};
    case OpKind::Cat: {
      std::vector<DTensor> all{x};
      all.insert(all.end(), ops.more_inputs.begin(), ops.more_inputs.end());
      return {cat(all, o.cat_dim)};
    }
    case OpKind::LeakyRelu:
      return {leaky_relu(x, o.negative_slope)};
    case OpKind::Gelu:
      return {gelu(x, o.approximate)};
    case OpKind::Silu:
      return {silu(x)};
    case OpKind::Sigmoid:
      return {dtensor::sigmoid(x)};
    case OpKind::Tanh:
      return {dtensor::tanh(x)};
    case OpKind::Relu:
      return {relu(x)};
    case OpKind::MseLoss:
      return {mse_loss(x, *ops.target, o.reduction)};
    case OpKind::CrossEntropy:
      return {cross_entropy(x, *ops.target, cross_entropy_options(o))};
    case OpKind::L1Loss:
      return {l1_loss(x, *ops.target, o.reduction)};
    case OpKind::SmoothL1Loss:
      return {smooth_l1_loss(x, *ops.target, o.reduction, o.beta)};
    case OpKind::HuberLoss:
      return {huber_loss(x, *ops.target, o.reduction, o.delta)};
    case OpKind::BinaryCrossEntropyWithLogits:
      return {binary_cross_entropy_with_logits(x, *ops.target, o.reduction)};
    case OpKind::Dropout:
      return {dropout(x, o.p, dropout_seed(o.seed), 0)};
    case OpKind::Linear:
      return {linear(x, *ops.weight, ops.bias)};
    default:
      break;  // the tensor API, above
  }
  throw std::logic_error("dtensor-op: unknown op");
}

Grads run_backward(const Options& o, const Operands& ops, const std::optional<DTensor>& gy_opt) {
  Grads g;
  const DTensor& x = ops.input;
  if (o.is_loss()) {
    const DTensor& t = *ops.target;
    switch (o.op) {
      case OpKind::MseLoss:
        g.grad_input = mse_loss_backward(x, t, o.reduction, 1.0);
        break;
      case OpKind::L1Loss:
        g.grad_input = l1_loss_backward(x, t, o.reduction, 1.0);
        break;
      case OpKind::SmoothL1Loss:
        g.grad_input = smooth_l1_loss_backward(x, t, o.reduction, o.beta, 1.0);
        break;
      case OpKind::HuberLoss:
        g.grad_input = huber_loss_backward(x, t, o.reduction, o.delta, 1.0);
        break;
      case OpKind::BinaryCrossEntropyWithLogits:
        g.grad_input = binary_cross_entropy_with_logits_backward(x, t, o.reduction, 1.0);
        break;
      default:
        g.grad_input = cross_entropy_backward(x, t, cross_entropy_options(o), 1.0);
        break;
    }
    return g;
  }
  const DTensor& gy = gy_opt.value();
  if (o.is_view()) {
    // Through autograd, as a user's program gets it (placed like the input).
    DTensor xi = x.detach();
    xi.requires_grad_();
    backward(view_forward(o, xi), gy);
    g.grad_input = xi.grad();
    return g;
  }
  if (o.is_binary() || o.is_unary() || o.is_reduction() || o.is_softmax()) {
    // Through autograd, as a user's program gets them: the other operand's
    // gradient summed back to its shape, placed like it.
    DTensor xi = x.detach();
    xi.requires_grad_();
    std::optional<DTensor> bi;
    if (ops.other) {
      bi = ops.other->detach();
      bi->requires_grad_();
    }
    backward(tensor_api_forward(o, xi, bi), gy);
    g.grad_input = xi.grad();
    if (bi) g.grad_other = bi->grad();
    return g;
  }
  if (o.is_norm()) {
    const NormOutputMask mask{true, o.affine, o.affine};
    NormGrads r;
    switch (o.op) {
      case OpKind::BatchNorm:
        r = batch_norm_backward(gy, x, ops.weight, ops.running_mean, ops.running_var, o.training,
                                o.eps, mask);
        break;
      case OpKind::GroupNorm:
        r = group_norm_backward(gy, x, o.num_groups, ops.weight, o.eps, mask);
        break;
      case OpKind::InstanceNorm:
        r = instance_norm_backward(gy, x, ops.weight, o.eps, mask);
        break;
      default:
        r = layer_norm_backward(gy, x, ops.weight, o.eps, mask);
        break;
    }
    g.grad_input = std::move(r.grad_input);
    if (o.affine) {
      g.grad_weight = std::move(r.grad_weight);
      g.grad_bias = std::move(r.grad_bias);
    }
    return g;
  }
  if (o.op == OpKind::Linear) {
    LinearGrads r = linear_backward(gy, x, *ops.weight, o.bias);
    g.grad_input = std::move(r.grad_input);
    g.grad_weight = std::move(r.grad_weight);
    g.grad_bias = std::move(r.grad_bias);
    return g;
  }
  if (o.has_weight()) {
    const ConvOutputMask mask{true, true, o.bias};
    const ConvGrads c =
        is_conv(o)
            ? convolution_backward(gy, ops.input, *ops.weight, o.conv_params(), mask)
            : conv_transpose_backward(gy, ops.input, *ops.weight, o.conv_transpose_params(), mask);
    g.grad_input = c.grad_input;
    g.grad_weight = c.grad_weight;
    if (o.bias) g.grad_bias = c.grad_bias;
    return g;
  }
  switch (o.op) {
    case OpKind::MaxPool:
      g.grad_input = max_pool_backward(gy, ops.input, o.pool_params());
      break;
    case OpKind::AvgPool:
      g.grad_input = avg_pool_backward(gy, ops.input, o.pool_params());
      break;
    case OpKind::AdaptiveAvgPool:
      g.grad_input = adaptive_avg_pool_backward(gy, ops.input, o.output_size);
      break;
    case OpKind::AdaptiveMaxPool:
      g.grad_input = adaptive_max_pool_backward(gy, ops.input, o.output_size);
      break;
    case OpKind::Pad:
      g.grad_input = pad_backward(gy, ops.input, o.padding, o.mode);
      break;
    case OpKind::Upsample:
      g.grad_input = upsample_backward(gy, x, o.upsample_params());
      break;
    case OpKind::Cat: {
      std::vector<DTensor> all{x};
      all.insert(all.end(), ops.more_inputs.begin(), ops.more_inputs.end());
      std::vector<DTensor> pieces = cat_backward(gy, all, o.cat_dim);
      if (!pieces.empty()) g.grad_input = pieces[0];
      for (std::size_t k = 1; k < pieces.size(); ++k)
        g.grad_more_inputs.push_back(pieces[k]);
      break;
    }
    case OpKind::LeakyRelu:
      g.grad_input = leaky_relu_backward(gy, x, o.negative_slope);
      break;
    case OpKind::Gelu:
      g.grad_input = gelu_backward(gy, x, o.approximate);
      break;
    case OpKind::Silu:
      g.grad_input = silu_backward(gy, x);
      break;
    case OpKind::Sigmoid:
      g.grad_input = sigmoid_backward(gy, x);
      break;
    case OpKind::Tanh:
      g.grad_input = tanh_backward(gy, x);
      break;
    case OpKind::Relu:
      g.grad_input = relu_backward(gy, x);
      break;
    case OpKind::Dropout:
      g.grad_input = dropout_backward(gy, o.p, dropout_seed(o.seed), 0);
      break;
    default:
      break;
  }
  return g;
}

GlobalTensors gather_global(const Options& o, const Seeds& seeds, const Forward& forward,
                            const std::optional<DTensor>& grad_output, const Grads& grads) {
  GlobalTensors g;
  g.input = whole_input(o, seeds);
  if (o.is_binary()) g.other = Tensor::rand(o.other_shape, o.dtype, other_seed(seeds));
  if (o.has_weight()) {
    g.weight = Tensor::rand(o.weight_shape(), o.dtype, seeds.weight);
    if (o.bias) g.bias = Tensor::rand(o.bias_shape(), o.dtype, seeds.bias);
  }
  for (std::int64_t k = 1; k < o.inputs; ++k)
    g.more_inputs.push_back(Tensor::rand(o.input_shape(k), o.dtype, input_seed(seeds, k)));
  if (o.has_running_stats()) {
    g.running_mean = whole_running_mean(o, seeds);
    g.running_var = whole_running_var(o, seeds);
  }
  if (o.op == OpKind::MseLoss || o.is_pointwise_loss()) g.target = whole_target(o, seeds);
  if (o.op == OpKind::CrossEntropy)
    g.target = o.class_indices ? whole_class_indices(o, seeds) : whole_probabilities(o, seeds);
  const auto host = [](const DTensor& t) { return t.full_tensor().to(Device::cpu()); };
  g.output = host(forward.output);
  if (forward.running_mean) g.running_mean_out = host(*forward.running_mean);
  if (forward.running_var) g.running_var_out = host(*forward.running_var);
  for (const auto& t : grads.grad_more_inputs)
    g.grad_more_inputs.push_back(host(t));
  if (grad_output) g.grad_output = Tensor::rand(grad_output->shape(), o.dtype, seeds.grad_output);
  if (grads.grad_input) g.grad_input = host(*grads.grad_input);
  if (grads.grad_other) g.grad_other = host(*grads.grad_other);
  if (grads.grad_weight) g.grad_weight = host(*grads.grad_weight);
  if (grads.grad_bias) g.grad_bias = host(*grads.grad_bias);
  return g;
}

}  // namespace dtensor::op_cli
