// The sharding strategies of convolution and convolution_backward, and the
// role each mesh dim plays in a chosen strategy (docs/design.md §5):
//
//   role      input      weight   bias     output     grad_input grad_weight grad_bias
//   batch     S(0)       R        R        S(0)       S(0)       P           P
//   spatial   S(d>=2)    R        R        S(d)       S(d)       P           P
//   channel   S(1)       S(1)     R        P          S(1)       S(1)        R
//   filter    R          S(0)     S(0)     S(1)       P          S(0)        S(0)
//   replicate R          R        R        R          R          R           R
//   partial   P          R        R        P          P          P           P
//
// (In the backward, grad_output is placed like the forward output; for
// `partial` it is grad_output that is Partial and the input replicated.)
// Channel and filter parallelism need groups == 1; a spatial dim may be
// sharded on one mesh dim only (the halo plan is per dim).
#pragma once

#include <vector>

#include "dtensor/ops/registry.h"

namespace dtensor::conv {

enum class MeshDimRole { Batch, Spatial, Channel, Filter, Replicate, Partial };

/// Whole-mesh strategies for a forward call (inputs: input, weight[, bias]).
std::vector<ShardingStrategy> forward_strategies(const OpSchema& s);
/// Whole-mesh strategies for a backward call (inputs: grad_output, input,
/// weight; outputs: the gradients the mask asks for, in order).
std::vector<ShardingStrategy> backward_strategies(const OpSchema& s);

/// The role of each mesh dim, read from the (redistributed) input and weight placements.
std::vector<MeshDimRole> roles_of(const Placements& input, const Placements& weight);

}  // namespace dtensor::conv
