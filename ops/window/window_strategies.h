// The sharding strategies of the per-channel window operators (pools, pad):
// per mesh dim one of
//
//   role       inputs (input | grad_output, input)   output
//   batch      S(0)                                   S(0)
//   channel    S(1)                                   S(1)
//   spatial    S(d), d >= 2 (the engine's halo)       S(d)
//   replicate  R                                      R
//   partial    P (forward of a linear op only)        P
//
// combined over the mesh, never sharding one tensor dim on two mesh dims (a
// window plan is per dim). An input that is Partial for an operator that is
// not linear (max) has no matching row: the propagator reduces it first.
#pragma once

#include <vector>

#include "dtensor/ops/registry.h"

namespace dtensor::window {

/// Strategies for `inputs` DTensor inputs of rank `ndim` placed alike, one output.
std::vector<ShardingStrategy> per_channel_strategies(std::int64_t mesh_ndim, std::int64_t ndim,
                                                     std::size_t inputs, bool linear);

}  // namespace dtensor::window
