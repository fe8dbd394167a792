// The sharding strategies of the normalisation operators: per mesh dim, the
// input's placement decides everyone else's:
//
//   input      weight, bias,        output   grad_input  grad_weight, grad_bias
//              running stats [C]
//   S(0)       R                    S(0)     S(0)        P
//   S(1)       S(0)                 S(1)     S(1)        S(0)
//   S(d>=2)    R                    S(d)     S(d)        P
//   R          R                    R        R           R
//
// layer_norm's parameters are [C, spatial...]: S(d>=1) gives them S(d-1) and
// their gradients S(d-1) too. A tensor dim may be sharded on several mesh
// dims (nested chunks; the statistics do not care). group_norm offers S(1)
// only when every rank's channel shard is whole groups; otherwise the
// propagator moves the channels. There is no Partial row: normalisation is
// not linear, so a Partial input is reduced first.
#pragma once

#include <vector>

#include "dtensor/ops/registry.h"
#include "ops/norm/norm_call.h"

namespace dtensor::norm {

/// Whole-mesh strategies for a decoded call (forward or backward).
std::vector<ShardingStrategy> norm_strategies(const NormCall& c);

/// Whether `placements` of the input keep every rank's channel shard made of
/// whole groups of `channels / num_groups` channels.
bool channel_shards_align(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
                          std::int64_t num_groups);

}  // namespace dtensor::norm
