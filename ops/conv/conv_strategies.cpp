#include "ops/conv/conv_strategies.h"

#include "ops/conv/conv_call.h"
#include "ops/detail/weighted_strategies.h"

namespace dtensor::conv {
namespace {

using Row = detail::WeightedRow<MeshDimRole>;

std::vector<Row> rows_for(std::int64_t spatial_dims, std::int64_t groups) {
  // Channel and filter parallelism only without groups (a group's channels
  // would straddle the shards).
  if (groups != 1) return detail::weighted_rows<MeshDimRole>(spatial_dims);
  const Placement R = Replicate(), P = Partial();
  return detail::weighted_rows<MeshDimRole>(
      spatial_dims,
      {{MeshDimRole::Channel, Shard(1), Shard(1), R, P, R, Shard(1), Shard(1), Shard(1), R},
       {MeshDimRole::Filter, R, Shard(0), Shard(0), Shard(1), Shard(1), R, P, Shard(0), Shard(0)}});
}

}  // namespace

std::vector<ShardingStrategy> forward_strategies(const OpSchema& s) {
  const ForwardCall& c = decoded<ForwardCall>(s);
  return detail::weighted_forward_strategies(c.input.mesh().ndim(),
                                             rows_for(c.input.spec().ndim() - 2, c.params.groups),
                                             c.bias != nullptr);
}

std::vector<ShardingStrategy> backward_strategies(const OpSchema& s) {
  const BackwardCall& c = decoded<BackwardCall>(s);
  return detail::weighted_backward_strategies(
      c.input.mesh().ndim(), rows_for(c.input.spec().ndim() - 2, c.params.groups), c.mask);
}

std::vector<MeshDimRole> roles_of(const Placements& input, const Placements& weight) {
  std::vector<MeshDimRole> roles;
  for (std::size_t m = 0; m < input.size(); ++m) {
    const Placement& x = input[m];
    if (x.is_partial())
      roles.push_back(MeshDimRole::Partial);
    else if (x.is_shard(0))
      roles.push_back(MeshDimRole::Batch);
    else if (x.is_shard(1))
      roles.push_back(MeshDimRole::Channel);
    else if (x.is_shard())
      roles.push_back(MeshDimRole::Spatial);
    else if (weight[m].is_shard(0))
      roles.push_back(MeshDimRole::Filter);
    else
      roles.push_back(MeshDimRole::Replicate);
  }
  return roles;
}

}  // namespace dtensor::conv
