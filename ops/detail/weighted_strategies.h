// The strategy builders shared by the weighted window operators
// (convolution, conv_transpose): each keeps its own table, one row per role a
// mesh dim can play, and these turn a table into whole-mesh strategies for
// the forward (inputs: input, weight[, bias]; output) and the backward
// (inputs: grad_output, input, weight; outputs: the gradients the mask asks
// for, in order). A spatial dim may be sharded on one mesh dim only (the
// window is planned per dim), so combinations doing otherwise are dropped.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/registry.h"
#include "ops/detail/combinations.h"

namespace dtensor::detail {

/// One mesh dim's placements for one role. `backward_input` is where the
/// backward wants the forward's input (Replicate in the partial row: there
/// it is grad_output that carries the pending sum).
template <class Role>
struct WeightedRow {
  Role role;
  Placement input, weight, bias, output;
  Placement grad_output, backward_input, grad_input, grad_weight, grad_bias;
};

/// The rows every weighted operator has, in order: batch, each spatial dim
/// (the engine's halo), then `more` (convolution's channel and filter
/// rows), the replicated row and the partial one (the input a pending sum:
/// the bias goes to one rank, the backward's grad_output carries the sum).
template <class Role>
std::vector<WeightedRow<Role>> weighted_rows(std::int64_t spatial_dims,
                                             const std::vector<WeightedRow<Role>>& more = {}) {
  const Placement R = Replicate(), P = Partial();
  std::vector<WeightedRow<Role>> rows;
  rows.push_back({Role::Batch, Shard(0), R, R, Shard(0), Shard(0), Shard(0), Shard(0), P, P});
  for (std::int64_t d = 2; d < 2 + spatial_dims; ++d)
    rows.push_back({Role::Spatial, Shard(d), R, R, Shard(d), Shard(d), Shard(d), Shard(d), P, P});
  rows.insert(rows.end(), more.begin(), more.end());
  rows.push_back({Role::Replicate, R, R, R, R, R, R, R, R, R});
  rows.push_back({Role::Partial, P, R, R, P, P, R, P, P, P});
  return rows;
}

/// Every combination of rows over the mesh dims (mesh dim 0 slowest), minus
/// those that shard one spatial dim on two mesh dims.
template <class Role, typename Build>
std::vector<ShardingStrategy> combine_weighted_rows(std::int64_t mesh_ndim,
                                                    const std::vector<WeightedRow<Role>>& rows,
                                                    Build build) {
  return combine_rows(
      mesh_ndim, rows,
      [](const WeightedRow<Role>& a, const WeightedRow<Role>& b) {
        return a.role == Role::Spatial && b.role == Role::Spatial && a.input == b.input;
      },
      build);
}

template <class Role>
std::vector<ShardingStrategy> weighted_forward_strategies(
    std::int64_t mesh_ndim, const std::vector<WeightedRow<Role>>& rows, bool has_bias) {
  using Row = WeightedRow<Role>;
  return combine_weighted_rows(mesh_ndim, rows, [&](const std::vector<const Row*>& pick) {
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

template <class Role>
std::vector<ShardingStrategy> weighted_backward_strategies(
    std::int64_t mesh_ndim, const std::vector<WeightedRow<Role>>& rows,
    const ConvOutputMask& mask) {
  using Row = WeightedRow<Role>;
  return combine_weighted_rows(mesh_ndim, rows, [&](const std::vector<const Row*>& pick) {
    ShardingStrategy st;
    st.inputs.resize(3);
    for (const Row* r : pick) {
      st.inputs[0].push_back(r->grad_output);
      st.inputs[1].push_back(r->backward_input);
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

}  // namespace dtensor::detail
