// The cost model of redistribution: what the sharding propagator prices its
// candidate strategies with, beside the planner whose steps it follows.
#pragma once

#include "dtensor/placement/dtensor_spec.h"

namespace dtensor {

/// Estimated bytes per rank that redistributing `src` to `dst` moves
/// (infinity when the transition is impossible), following
/// plan_redistribute's steps. Rank 0's shard is the largest under the chunk
/// rule, so its sizes stand for the slowest rank.
double redistribute_cost_bytes(const DTensorSpec& src, const Placements& dst);

}  // namespace dtensor
