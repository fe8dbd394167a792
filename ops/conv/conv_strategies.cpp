#include "ops/conv/conv_strategies.h"

#include "ops/conv/conv_call.h"
#include "ops/detail/weighted_strategies.h"

namespace dtensor::conv {
namespace {

using Row = detail::WeightedRow<MeshDimRole>;

std::vector<Row> rows_for(std::int64_t spatial_dims, std::int64_t groups) {
  const Placement R = Replicate(), P = Partial();
  std::vector<Row> rows;
  rows.push_back(
      {MeshDimRole::Batch, Shard(0), R, R, Shard(0), Shard(0), Shard(0), Shard(0), P, P});
  for (std::int64_t d = 2; d < 2 + spatial_dims; ++d)
    rows.push_back(
        {MeshDimRole::Spatial, Shard(d), R, R, Shard(d), Shard(d), Shard(d), Shard(d), P, P});
  if (groups == 1) {
    rows.push_back(
        {MeshDimRole::Channel, Shard(1), Shard(1), R, P, R, Shard(1), Shard(1), Shard(1), R});
    rows.push_back(
        {MeshDimRole::Filter, R, Shard(0), Shard(0), Shard(1), Shard(1), R, P, Shard(0), Shard(0)});
  }
  rows.push_back({MeshDimRole::Replicate, R, R, R, R, R, R, R, R, R});
  rows.push_back({MeshDimRole::Partial, P, R, R, P, P, R, P, P, P});
  return rows;
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
