#include "ops/norm/norm_strategies.h"

#include "ops/detail/combinations.h"

namespace dtensor::norm {
namespace {

// The placement, on one mesh dim, of a parameter (weight, bias, running
// statistics) when the input has `p` there.
Placement param_placement(NormKind kind, const Placement& p) {
  if (!p.is_shard()) return Replicate();
  if (kind == NormKind::Layer) return p.dim() >= 1 ? Shard(p.dim() - 1) : Replicate();
  return p.dim() == 1 ? Shard(0) : Replicate();
}

// The same for a parameter's gradient: the sum over the batch (and, for
// the [C] parameters, space) is pending where those dims are sharded.
Placement grad_param_placement(NormKind kind, const Placement& p) {
  if (!p.is_shard()) return Replicate();
  if (kind == NormKind::Layer) return p.dim() >= 1 ? Shard(p.dim() - 1) : Partial();
  return p.dim() == 1 ? Shard(0) : Partial();
}

Placements map(const Placements& in, Placement (*f)(NormKind, const Placement&), NormKind kind) {
  Placements out;
  for (const Placement& p : in)
    out.push_back(f(kind, p));
  return out;
}

}  // namespace

bool channel_shards_align(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
                          std::int64_t num_groups) {
  bool sharded = false;
  for (const Placement& p : placements)
    sharded = sharded || p.is_shard(1);
  if (!sharded) return true;
  const std::int64_t group = shape[1] / num_groups;
  if (group <= 1) return true;
  const DTensorSpec spec(mesh, placements, shape, DType::F32);
  std::vector<std::int64_t> coord(static_cast<std::size_t>(mesh.ndim()), 0);
  while (true) {
    if (spec.global_offset_at(coord)[1] % group != 0 || spec.local_shape_at(coord)[1] % group != 0)
      return false;
    std::int64_t m = mesh.ndim() - 1;
    for (; m >= 0; --m) {
      if (++coord[static_cast<std::size_t>(m)] < mesh.size(m)) break;
      coord[static_cast<std::size_t>(m)] = 0;
    }
    if (m < 0) return true;
  }
}

std::vector<ShardingStrategy> norm_strategies(const NormCall& c) {
  const DTensor& x = *c.input;
  const DeviceMesh& mesh = x.mesh();
  const std::int64_t ndim = x.ndim();
  std::vector<Placement> rows;
  for (std::int64_t d = 0; d < ndim; ++d)
    rows.push_back(Shard(d));
  rows.push_back(Replicate());
  const NormKind kind = c.op.kind;
  std::vector<ShardingStrategy> out;
  detail::for_each_combination(mesh.ndim(), rows.size(), [&](const std::vector<std::size_t>& idx) {
    Placements pick;
    for (std::int64_t m = 0; m < mesh.ndim(); ++m)
      pick.push_back(rows[idx[static_cast<std::size_t>(m)]]);
    if (kind == NormKind::Group && !channel_shards_align(mesh, pick, x.shape(), c.num_groups))
      return;
    const Placements param = map(pick, param_placement, kind);
    const Placements grad = map(pick, grad_param_placement, kind);
    ShardingStrategy s;
    if (c.backward) s.inputs.push_back(pick);  // grad_output
    s.inputs.push_back(pick);
    for (const DTensor* p : {c.weight, c.bias, c.running_mean, c.running_var})
      if (p) s.inputs.push_back(param);
    if (c.relu_output) s.inputs.push_back(pick);  // the fused relu's output, like the input
    if (!c.backward) {
      s.outputs.push_back(pick);
      if (c.updates_running_stats()) {
        s.outputs.push_back(param);
        s.outputs.push_back(param);
      }
    } else {
      if (c.mask.input) s.outputs.push_back(pick);
      if (c.mask.weight) s.outputs.push_back(grad);
      if (c.mask.bias) s.outputs.push_back(grad);
    }
    out.push_back(std::move(s));
  });
  return out;
}

}  // namespace dtensor::norm
