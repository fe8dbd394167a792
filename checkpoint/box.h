// Boxes of a global tensor ([offsets, offsets + extents) per dim) and the
// contiguous runs in which a region of one row-major box maps onto another:
// the geometry of reading any saved shard into any target shard.
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/core/shape.h"

namespace dtensor::checkpoint {

struct Box {
  Shape offsets;
  Shape extents;
};

/// The common part of two boxes of the same rank; nullopt when it holds no element.
std::optional<Box> intersect(const Box& a, const Box& b);

/// Calls fn(src_element, dst_element, elements) once per contiguous run of
/// `region` (which lies inside both `src` and `dst`), with element offsets
/// inside the row-major layouts of `src` and `dst`. Trailing dims that the
/// region spans whole in both boxes are merged into one run, so a region of
/// whole rows is a single call.
template <typename F>
void for_each_run(const Box& region, const Box& src, const Box& dst, F&& fn) {
  const auto n = static_cast<std::int64_t>(region.extents.size());
  if (n == 0) {
    fn(std::int64_t{0}, std::int64_t{0}, std::int64_t{1});  // a 0-d tensor: one element
    return;
  }
  const Shape src_strides = contiguous_strides(src.extents);
  const Shape dst_strides = contiguous_strides(dst.extents);
  // Merge trailing dims while the region covers the dim below whole in both boxes.
  std::int64_t k = n - 1;
  std::int64_t run = region.extents[k];
  while (k > 0 && region.extents[k] == src.extents[k] && region.extents[k] == dst.extents[k]) {
    --k;
    run *= region.extents[k];
  }
  // Walk the outer dims 0 .. k-1 like an odometer.
  Shape index(static_cast<std::size_t>(k), 0);
  while (true) {
    std::int64_t s = 0, d = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t at = region.offsets[j] + (j < k ? index[j] : 0);
      s += (at - src.offsets[j]) * src_strides[j];
      d += (at - dst.offsets[j]) * dst_strides[j];
    }
    fn(s, d, run);
    std::int64_t j = k - 1;
    while (j >= 0 && ++index[j] == region.extents[j])
      index[j--] = 0;
    if (j < 0) return;
  }
}

}  // namespace dtensor::checkpoint
