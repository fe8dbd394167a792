#include "tools/dtensor-op/problem.h"

#include <algorithm>

#include "dtensor/ops/autograd.h"
#include "tools/dtensor-op/op_table.h"

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
  return DTensor(std::move(local), spec);
}

std::uint64_t other_seed(const Seeds& seeds) {
  return derived_seed(seeds.input, 301);
}

// The whole input: rand, or 1 + rand / 2 for the ops that need it positive.
Tensor whole_input(const Options& o, const Seeds& seeds) {
  if (o.positive_input()) return positive(Tensor::rand(o.input, DType::F64, seeds.input), o.dtype);
  return Tensor::rand(o.input_shape(0), o.dtype, seeds.input);
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
  return DTensor(local.to(mesh.device()), spec);
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
  const OpEntry& e = op_entry(o.op);
  if (e.whole_target)
    ops.target =
        sliced(mesh, e.target_placements ? e.target_placements(o, o.placements) : o.placements,
               e.whole_target(o, seeds));
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
  return op_entry(o.op).forward(o, ops);
}

Grads run_backward(const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
  return op_entry(o.op).backward(o, ops, gy);
}

Grads autograd_backward(const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
  Operands leaves = ops;
  leaves.input = ops.input.detach();
  leaves.input.requires_grad_();
  if (ops.other) {
    leaves.other = ops.other->detach();
    leaves.other->requires_grad_();
  }
  backward(run_forward(o, leaves).output, gy.value());
  Grads g;
  g.grad_input = leaves.input.grad();
  if (leaves.other) g.grad_other = leaves.other->grad();
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
  if (const OpEntry& e = op_entry(o.op); e.whole_target) g.target = e.whole_target(o, seeds);
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
