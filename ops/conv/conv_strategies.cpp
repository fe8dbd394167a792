#include "ops/conv/conv_strategies.h"

#include "ops/conv/conv_call.h"
#include "ops/detail/combinations.h"

namespace dtensor::conv {
namespace {

struct Row {  // one mesh dim's placements for one role
  MeshDimRole role;
  Placement input, weight, bias, output;
  Placement grad_output, grad_input, grad_weight, grad_bias;
};

std::vector<Row> rows_for(std::int64_t spatial_dims, std::int64_t groups) {
  const Placement R = Replicate(), P = Partial();
  std::vector<Row> rows;
  rows.push_back({MeshDimRole::Batch, Shard(0), R, R, Shard(0), Shard(0), Shard(0), P, P});
  for (std::int64_t d = 2; d < 2 + spatial_dims; ++d)
    rows.push_back({MeshDimRole::Spatial, Shard(d), R, R, Shard(d), Shard(d), Shard(d), P, P});
  if (groups == 1) {
    rows.push_back({MeshDimRole::Channel, Shard(1), Shard(1), R, P, R, Shard(1), Shard(1), R});
    rows.push_back(
        {MeshDimRole::Filter, R, Shard(0), Shard(0), Shard(1), Shard(1), P, Shard(0), Shard(0)});
  }
  rows.push_back({MeshDimRole::Replicate, R, R, R, R, R, R, R, R});
  rows.push_back({MeshDimRole::Partial, P, R, R, P, P, P, P, P});
  return rows;
}

// Every combination of rows over the mesh dims (mesh dim 0 slowest), minus
// those that shard one spatial dim on two mesh dims.
template <typename Build>
std::vector<ShardingStrategy> combine(std::int64_t mesh_ndim, const std::vector<Row>& rows,
                                      Build build) {
  return detail::combine_rows(
      mesh_ndim, rows,
      [](const Row& a, const Row& b) {
        return a.role == MeshDimRole::Spatial && b.role == MeshDimRole::Spatial &&
               a.input == b.input;
      },
      build);
}

}  // namespace

std::vector<ShardingStrategy> forward_strategies(const OpSchema& s) {
  const ForwardCall c = ForwardCall::decode(s);
  const DTensor& x = c.input;
  const bool has_bias = c.has_bias;
  const auto rows = rows_for(x.spec().ndim() - 2, c.params.groups);
  return combine(x.mesh().ndim(), rows, [&](const std::vector<const Row*>& pick) {
    ShardingStrategy st;
    st.inputs.resize(has_bias ? 3 : 2);
    st.outputs.resize(1);
    for (const Row* r : pick) {
      st.inputs[0].push_back(r->input);
      st.inputs[1].push_back(r->weight);
      if (has_bias) st.inputs[2].push_back(r->bias);
      st.outputs[0].push_back(r->output);
    }
    return st;
  });
}

std::vector<ShardingStrategy> backward_strategies(const OpSchema& s) {
  const BackwardCall c = BackwardCall::decode(s);
  const DTensor& x = c.input;
  const ConvOutputMask mask = c.mask;
  const auto rows = rows_for(x.spec().ndim() - 2, c.params.groups);
  return combine(x.mesh().ndim(), rows, [&](const std::vector<const Row*>& pick) {
    ShardingStrategy st;
    st.inputs.resize(3);
    for (const Row* r : pick) {
      st.inputs[0].push_back(r->grad_output);
      st.inputs[1].push_back(r->role == MeshDimRole::Partial ? Replicate() : r->input);
      st.inputs[2].push_back(r->weight);
    }
    auto column = [&](Placement Row::*field) {
      Placements p;
      for (const Row* r : pick)
        p.push_back(r->*field);
      return p;
    };
    if (mask.input) st.outputs.push_back(column(&Row::grad_input));
    if (mask.weight) st.outputs.push_back(column(&Row::grad_weight));
    if (mask.bias) st.outputs.push_back(column(&Row::grad_bias));
    return st;
  });
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
