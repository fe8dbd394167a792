// Which shards a save writes and who writes each: a pure function of the
// spec, so every rank computes the same plan without talking.
#pragma once

#include <vector>

#include "checkpoint/box.h"
#include "dtensor/placement/dtensor_spec.h"

namespace dtensor::checkpoint {

struct PlannedShard {
  Box box;
  /// The lowest world rank that holds this box: the one that writes it.
  int owner = 0;
};

/// The distinct non-empty shards of a tensor laid out by `spec` (which has no
/// Partial placement), in the row-major order of the mesh coordinates that
/// first hold them. Replicas of a box (Replicate dims, or uneven chunks that
/// leave several ranks the same box) are one shard.
std::vector<PlannedShard> plan_shards(const DTensorSpec& spec);

}  // namespace dtensor::checkpoint
