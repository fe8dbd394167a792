// Walks two equally shaped strided views one row at a time, so element-wise
// kernels see (pointer offsets, row length, row strides) and can use a tight
// loop or memcpy for dense rows.
//
// The loop nest is simplified first, so that rows are as long as the views
// allow: dims of extent 1 are dropped; a dim is merged into the next one
// where both views step over the pair as one run (a contiguous block of rows
// becomes one row); and when the innermost dim is still short (a halo strip
// a few columns wide) and another is longer, the longest becomes the row,
// walked with its strides (one call per column, not one per row of two).
// The visiting order is then not row-major: callers apply the same operation
// to every pair of elements, in any order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "dtensor/core/shape.h"

namespace dtensor::detail {

/// Extents and the two views' strides, outermost first.
struct RowNest {
  std::vector<std::int64_t> shape, strides_a, strides_b;
};

/// The nest of `shape` simplified as above (empty: one element).
inline RowNest simplified_nest(const Shape& shape, const Shape& strides_a, const Shape& strides_b) {
  // Built innermost first, then reversed.
  RowNest n;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (!n.shape.empty() && strides_a[d] == n.shape.back() * n.strides_a.back() &&
        strides_b[d] == n.shape.back() * n.strides_b.back()) {
      n.shape.back() *= shape[d];
      continue;
    }
    n.shape.push_back(shape[d]);
    n.strides_a.push_back(strides_a[d]);
    n.strides_b.push_back(strides_b[d]);
  }
  // A short innermost row: the longest dim goes inside instead.
  constexpr std::int64_t kShortRow = 16;
  if (n.shape.size() > 1 && n.shape.front() < kShortRow) {
    std::size_t longest = 0;
    for (std::size_t d = 1; d < n.shape.size(); ++d)
      if (n.shape[d] > n.shape[longest]) longest = d;
    std::swap(n.shape[0], n.shape[longest]);
    std::swap(n.strides_a[0], n.strides_a[longest]);
    std::swap(n.strides_b[0], n.strides_b[longest]);
  }
  for (auto* v : {&n.shape, &n.strides_a, &n.strides_b})
    std::reverse(v->begin(), v->end());
  return n;
}

template <typename RowFn>
void for_each_row(const Shape& shape, const Shape& strides_a, std::int64_t offset_a,
                  const Shape& strides_b, std::int64_t offset_b, RowFn&& row) {
  for (auto e : shape)
    if (e == 0) return;
  const RowNest n = simplified_nest(shape, strides_a, strides_b);
  const std::size_t nd = n.shape.size();
  if (nd == 0) {
    row(offset_a, offset_b, std::int64_t{1}, std::int64_t{1}, std::int64_t{1});
    return;
  }
  const std::int64_t inner = n.shape[nd - 1];
  const std::int64_t sa = n.strides_a[nd - 1], sb = n.strides_b[nd - 1];
  std::vector<std::int64_t> idx(nd - 1, 0);
  std::int64_t oa = offset_a, ob = offset_b;
  while (true) {
    row(oa, ob, inner, sa, sb);
    // Advance the outer multi-index like an odometer.
    std::size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < n.shape[d]) {
        oa += n.strides_a[d];
        ob += n.strides_b[d];
        break;
      }
      oa -= n.strides_a[d] * (n.shape[d] - 1);
      ob -= n.strides_b[d] * (n.shape[d] - 1);
      idx[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

}  // namespace dtensor::detail
