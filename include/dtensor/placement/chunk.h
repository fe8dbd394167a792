// torch.chunk's split rule, the one every rank applies to every other rank's
// shard: c = ceil(L / P); rank r owns [min(r*c, L), min((r+1)*c, L)). Trailing
// ranks may own nothing (L=8, P=5 -> 2,2,2,2,0). Sizes are never negotiated
// at run time: they follow from the global shape.
#pragma once

#include <cstdint>

namespace dtensor {

struct Extent {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::int64_t end() const { return offset + length; }
  bool operator==(const Extent&) const = default;
};

/// The part of [0, L) that rank r of P owns.
Extent chunk_extent(std::int64_t L, std::int64_t P, std::int64_t r);

}  // namespace dtensor
