// How the view operators (reshape, permute, narrow) carry placements from
// their input to their output, after PyTorch DTensor's view rules: a sharded
// dim stays sharded where the view keeps each rank's shard a contiguous block
// of the result, laid out as the library lays out shards (torch.chunk:
// placement/chunk.h); otherwise that dim is redistributed to Replicate first.
// Replicate and Partial pass through unchanged (views are linear).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/placement/dtensor_spec.h"

namespace dtensor::detail {

/// What the input is redistributed to, and the output's placements.
struct ViewPlacements {
  Placements input;
  Placements output;
};

/// reshape of a tensor of spec `input` to `shape` (same numel, resolved).
/// Shard(d) is kept, moved to the first non-singleton output dim of d's merge
/// or split group, when every dim before d in its group has size 1 and every
/// rank's shard of the result is its shard of the input: a merge keeps the
/// outermost dim's shard when the chunk boundaries agree (L=4 merged with 3
/// over 2 ranks: 6 + 6 elements; L=3 merged with 2 over 2 ranks would give
/// 4 + 2 where the result's chunks are 3 + 3, so that dim is replicated).
ViewPlacements reshape_placements(const DTensorSpec& input, const Shape& shape);

/// permute by `order` (output dim k is input dim order[k]): every Shard(d)
/// follows d; nothing moves.
ViewPlacements permute_placements(const Placements& input, const std::vector<std::int64_t>& order);

/// narrow along `dim`: Shard(dim) replicated (the narrowed range would not be
/// chunk-laid-out over the ranks), everything else kept.
ViewPlacements narrow_placements(const Placements& input, std::int64_t dim);

}  // namespace dtensor::detail
