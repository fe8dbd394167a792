// Where a convolution-like operator's input gradient goes: back in the
// placements the caller's input had (when the propagator moved the input,
// the gradient moves back), except that a Partial where the input was
// replicated stays pending: reducing it is the caller's choice (filter
// parallelism gives one Partial term per filter shard).
#pragma once

#include "dtensor/placement/dtensor.h"
#include "dtensor/placement/redistribute.h"

namespace dtensor::detail {

inline DTensor placed_like_input(const DTensor& grad, const DTensor& input) {
  Placements target = input.placements();
  for (std::size_t m = 0; m < target.size(); ++m) {
    const Placement& g = grad.placements()[m];
    // The gradient of each pending term of a Partial input is the whole
    // gradient: whatever placement it was computed in is right (and a shard
    // could not become a pending sum anyway).
    if (target[m].is_partial() || (g.is_partial() && target[m].is_replicate())) target[m] = g;
  }
  return target == grad.placements() ? grad : grad.redistribute(grad.mesh(), target);
}

}  // namespace dtensor::detail
