#include "ops/window/conv_transpose_strategies.h"

#include "ops/detail/weighted_strategies.h"
#include "ops/window/conv_transpose_call.h"

namespace dtensor::tconv {
namespace {

using Row = detail::WeightedRow<MeshDimRole>;

std::vector<Row> rows_for(std::int64_t spatial_dims) {
  return detail::weighted_rows<MeshDimRole>(spatial_dims);  // no channel or filter rows
}

}  // namespace

std::vector<ShardingStrategy> forward_strategies(const OpSchema& s) {
  const ForwardCall& c = decoded<ForwardCall>(s);
  return detail::weighted_forward_strategies(
      c.input.mesh().ndim(), rows_for(c.input.spec().ndim() - 2), c.bias != nullptr);
}

std::vector<ShardingStrategy> backward_strategies(const OpSchema& s) {
  const BackwardCall& c = decoded<BackwardCall>(s);
  return detail::weighted_backward_strategies(c.input.mesh().ndim(),
                                              rows_for(c.input.spec().ndim() - 2), c.mask);
}

std::vector<MeshDimRole> roles_of(const Placements& input) {
  std::vector<MeshDimRole> roles;
  for (const Placement& x : input) {
    if (x.is_partial())
      roles.push_back(MeshDimRole::Partial);
    else if (x.is_shard(0))
      roles.push_back(MeshDimRole::Batch);
    else if (x.is_shard())
      roles.push_back(MeshDimRole::Spatial);
    else
      roles.push_back(MeshDimRole::Replicate);
  }
  return roles;
}

}  // namespace dtensor::tconv
