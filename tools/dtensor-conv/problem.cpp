#include "tools/dtensor-conv/problem.h"

#include <set>

#include "dtensor/core/distributed.h"

namespace dtensor::conv_cli {
namespace {

// splitmix64: decorrelates the per-tensor seeds (seed, seed+1, ... would give
// the tensors of run S and those of run S+1 shifted copies of each other).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Placements replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<std::size_t>(mesh.ndim()), Placement::replicate());
}

// This rank's part of rand(shape, seed) under `spec`; zeros on the non-zero
// indices of Partial mesh dims.
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
  // Generated on the host (the seeded data are the host's), then moved to the
  // mesh's device (cuda:<local rank % count> with --device cuda).
  Tensor local = seeded_local(spec, seed).to(mesh.device());
  return DTensor(std::move(local), std::move(spec));
}

}  // namespace

Seeds Seeds::from(std::uint64_t seed) {
  const std::uint64_t base = mix(seed);
  return {mix(base + 1), mix(base + 2), mix(base + 3), mix(base + 4)};
}

Operands make_operands(const Options& o, const DeviceMesh& mesh, const Seeds& seeds) {
  const Shape w_shape = o.weight_shape();
  std::optional<DTensor> bias;
  if (o.bias) bias = seeded(mesh, replicated(mesh), {w_shape[0]}, o.dtype, seeds.bias);
  return {seeded(mesh, o.placements, o.input, o.dtype, seeds.input),
          seeded(mesh, replicated(mesh), w_shape, o.dtype, seeds.weight), std::move(bias)};
}

DTensor make_grad_output(const Options& o, const DTensor& output, const Seeds& seeds) {
  Placements placements = output.placements();
  for (auto& p : placements)
    if (p.is_partial()) p = Placement::replicate();
  return seeded(output.mesh(), placements, output.shape(), o.dtype, seeds.grad_output);
}

GlobalTensors gather_global(const Options& o, const Seeds& seeds, const DTensor& output,
                            const std::optional<DTensor>& grad_output,
                            const std::optional<ConvGrads>& grads) {
  GlobalTensors g;
  const Shape w_shape = o.weight_shape();
  g.input = Tensor::rand(o.input, o.dtype, seeds.input);
  g.weight = Tensor::rand(w_shape, o.dtype, seeds.weight);
  if (o.bias) g.bias = Tensor::rand({w_shape[0]}, o.dtype, seeds.bias);
  // Results come to the host: the oracle and the dump read them there.
  const auto host = [](const DTensor& t) { return t.full_tensor().to(Device::cpu()); };
  g.output = host(output);
  if (grad_output) g.grad_output = Tensor::rand(grad_output->shape(), o.dtype, seeds.grad_output);
  if (grads) {
    if (grads->grad_input) g.grad_input = host(*grads->grad_input);
    if (grads->grad_weight) g.grad_weight = host(*grads->grad_weight);
    if (grads->grad_bias) g.grad_bias = host(*grads->grad_bias);
  }
  return g;
}

Traffic traffic(const DeviceMesh& mesh) {
  std::set<ProcessGroup*> groups{world().get()};
  if (mesh.contains_this_rank()) {
    for (std::int64_t d = 0; d < mesh.ndim(); ++d)
      groups.insert(mesh.get_group(d).get());
    groups.insert(mesh.get_mesh_group().get());
  }
  Traffic t;
  for (ProcessGroup* g : groups) {
    t.sent += g->counters().bytes_sent.load();
    t.received += g->counters().bytes_received.load();
  }
  return t;
}

}  // namespace dtensor::conv_cli
