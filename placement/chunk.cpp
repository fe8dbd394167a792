#include "dtensor/placement/chunk.h"

#include <algorithm>

#include "dtensor/core/errors.h"

namespace dtensor {

Extent chunk_extent(std::int64_t L, std::int64_t P, std::int64_t r) {
  check_arg(L >= 0 && P >= 1 && r >= 0 && r < P, "placement",
            "chunk_extent: invalid length {} / parts {} / index {}", L, P, r);
  // ceil(L / P) and min(k * c, L) written so that nothing overflows for any
  // L and P (a shard dim of 2^62 over 3 ranks, or L near INT64_MAX): k * c is
  // formed only when it is at most L, which L / c tells without multiplying.
  const std::int64_t c = L / P + (L % P != 0);
  if (c == 0) return {0, 0};
  const auto start = [&](std::int64_t k) { return k <= L / c ? k * c : L; };
  const std::int64_t b = start(r);
  const std::int64_t e = start(r + 1);
  return {b, e - b};
}

}  // namespace dtensor
