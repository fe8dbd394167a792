#include "checkpoint/box.h"

#include <algorithm>

namespace dtensor::checkpoint {

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box out;
  for (std::size_t d = 0; d < a.extents.size(); ++d) {
    const std::int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const std::int64_t hi = std::min(a.offsets[d] + a.extents[d], b.offsets[d] + b.extents[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets.push_back(lo);
    out.extents.push_back(hi - lo);
  }
  return out;
}

}  // namespace dtensor::checkpoint
