// The sharding strategies of conv_transpose and conv_transpose_backward
// (whole-mesh, like the convolution's), one row per mesh dim:
//
//   role      input   weight  bias  output   grad_output grad_input grad_weight grad_bias
//   batch     S(0)    R       R     S(0)     S(0)        S(0)       P           P
//   spatial   S(d>=2) R       R     S(d)     S(d)        S(d)       P           P
//   replicate R       R       R     R        R           R          R           R
//   partial   P       R       R     P        P           P          P           P
//
// (In the backward's `partial` row it is grad_output that is Partial and the
// input replicated: every gradient is linear in grad_output.) A spatial dim
// may be sharded on one mesh dim only (the window engine plans per dim).
// The output of a spatially sharded dim is chunked on the OUTPUT extent.
#pragma once

#include <vector>

#include "dtensor/ops/registry.h"

namespace dtensor::tconv {

enum class MeshDimRole { Batch, Spatial, Replicate, Partial };

/// Whole-mesh strategies for a forward call (inputs: input, weight[, bias]).
std::vector<ShardingStrategy> forward_strategies(const OpSchema& s);
/// Whole-mesh strategies for a backward call (inputs: grad_output, input,
/// weight; outputs: the gradients the mask asks for, in order).
std::vector<ShardingStrategy> backward_strategies(const OpSchema& s);

/// The role of each mesh dim, read from the (redistributed) input placements.
std::vector<MeshDimRole> roles_of(const Placements& input);

}  // namespace dtensor::tconv
