#include "dtensor/placement/chunk.h"

#include <algorithm>

#include "dtensor/core/errors.h"

namespace dtensor {

Extent chunk_extent(std::int64_t L, std::int64_t P, std::int64_t r) {
  check_arg(L >= 0 && P >= 1 && r >= 0 && r < P, "placement",
            "chunk_extent: invalid length {} / parts {} / index {}", L, P, r);
  const std::int64_t c = (L + P - 1) / P;
  const std::int64_t b = std::min(r * c, L);
  const std::int64_t e = std::min((r + 1) * c, L);
  return {b, e - b};
}

}  // namespace dtensor
