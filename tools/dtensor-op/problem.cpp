#include "tools/dtensor-op/problem.h"

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/window_ops.h"

namespace dtensor::op_cli {
namespace {

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<std::size_t>(mesh.ndim()), Placement::replicate());
}

// This rank's part of rand(shape, seed) under `spec`; zeros on the non-zero
// indices of Partial mesh dims (as dtensor-conv).
Tensor seeded_local(const DTensorSpec& spec, std::uint64_t seed) {
  const auto& coord = spec.mesh().get_coordinate();
  if (coord)
    for (std::size_t i = 0; i < spec.placements().size(); ++i)
      if (spec.placements()[i].is_partial() && (*coord)[i] != 0)
        return Tensor::zeros(spec.local_shape(), spec.dtype());
  return Tensor::rand_slice(spec.shape(), spec.global_offset(), spec.local_shape(), spec.dtype(),
                            seed);
}

DTensor seeded(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
               DType dtype, std::uint64_t seed) {
  DTensorSpec spec(mesh, placements, shape, dtype);
  Tensor local = seeded_local(spec, seed).to(mesh.device());
  return DTensor(std::move(local), std::move(spec));
}

DTensor whole_on(const DeviceMesh& mesh, const Tensor& t) {
  return DTensor(t, DTensorSpec(mesh, replicated(mesh), t.shape(), t.dtype()));
}

bool is_conv(const Options& o) {
  return o.op == OpKind::Conv;
}

}  // namespace

Operands make_operands(const Options& o, const DeviceMesh& mesh, const Seeds& seeds) {
  Operands ops{seeded(mesh, o.placements, o.input, o.dtype, seeds.input), std::nullopt,
               std::nullopt};
  if (o.has_weight()) {
    ops.weight = seeded(mesh, replicated(mesh), o.weight_shape(), o.dtype, seeds.weight);
    if (o.bias) ops.bias = seeded(mesh, replicated(mesh), {o.out_channels}, o.dtype, seeds.bias);
  }
  return ops;
}

Operands local_operands(const Operands& global, const DeviceMesh& own_mesh) {
  Operands ops{whole_on(own_mesh, global.input.to_local()), std::nullopt, std::nullopt};
  if (global.weight) ops.weight = whole_on(own_mesh, global.weight->to_local());
  if (global.bias) ops.bias = whole_on(own_mesh, global.bias->to_local());
  return ops;
}

DTensor make_grad_output(const Options& o, const DTensor& output, const Seeds& seeds) {
  Placements placements = output.placements();
  for (auto& p : placements)
    if (p.is_partial()) p = Placement::replicate();
  return seeded(output.mesh(), placements, output.shape(), o.dtype, seeds.grad_output);
}

DTensor run_forward(const Options& o, const Operands& ops) {
  switch (o.op) {
    case OpKind::Conv:
      return convolution(ops.input, *ops.weight, ops.bias, o.conv_params());
    case OpKind::ConvTranspose:
      return conv_transpose(ops.input, *ops.weight, ops.bias, o.conv_transpose_params());
    case OpKind::MaxPool:
      return max_pool(ops.input, o.pool_params());
    case OpKind::AvgPool:
      return avg_pool(ops.input, o.pool_params());
    case OpKind::AdaptiveAvgPool:
      return adaptive_avg_pool(ops.input, o.output_size);
    case OpKind::AdaptiveMaxPool:
      return adaptive_max_pool(ops.input, o.output_size);
    case OpKind::Pad:
      return pad(ops.input, o.padding, o.mode, o.value);
  }
  throw std::logic_error("dtensor-op: unknown op");
}

Grads run_backward(const Options& o, const Operands& ops, const DTensor& gy) {
  Grads g;
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
    default:
      break;
  }
  return g;
}

GlobalTensors gather_global(const Options& o, const Seeds& seeds, const DTensor& output,
                            const std::optional<DTensor>& grad_output, const Grads& grads) {
  GlobalTensors g;
  g.input = Tensor::rand(o.input, o.dtype, seeds.input);
  if (o.has_weight()) {
    g.weight = Tensor::rand(o.weight_shape(), o.dtype, seeds.weight);
    if (o.bias) g.bias = Tensor::rand({o.out_channels}, o.dtype, seeds.bias);
  }
  const auto host = [](const DTensor& t) { return t.full_tensor().to(Device::cpu()); };
  g.output = host(output);
  if (grad_output) g.grad_output = Tensor::rand(grad_output->shape(), o.dtype, seeds.grad_output);
  if (grads.grad_input) g.grad_input = host(*grads.grad_input);
  if (grads.grad_weight) g.grad_weight = host(*grads.grad_weight);
  if (grads.grad_bias) g.grad_bias = host(*grads.grad_bias);
  return g;
}

}  // namespace dtensor::op_cli
