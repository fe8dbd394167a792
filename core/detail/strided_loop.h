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
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "dtensor/core/shape.h"

namespace dtensor::detail {

/// A list of int64s (a nest's extents or strides) with a capacity fixed when
/// it is made, held inline up to kInline of them and on the heap beyond: an
/// element-wise kernel walks a nest per call, and three or four vectors a
/// call were most of the allocations of a small tensor's copy.
class DimList {
 public:
  static constexpr std::size_t kInline = 8;
  /// Empty, with room for `capacity` entries (zeros until resized over).
  explicit DimList(std::size_t capacity) : heap_(capacity > kInline ? capacity : 0) {}
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void resize(std::size_t n) { size_ = n; }  // within the capacity
  void push_back(std::int64_t v) { data()[size_++] = v; }
  std::int64_t& operator[](std::size_t i) { return data()[i]; }
  std::int64_t operator[](std::size_t i) const { return data()[i]; }
  std::int64_t& front() { return data()[0]; }
  std::int64_t& back() { return data()[size_ - 1]; }
  std::int64_t back() const { return data()[size_ - 1]; }
  std::int64_t* begin() { return data(); }
  std::int64_t* end() { return data() + size_; }

 private:
  std::int64_t* data() { return heap_.empty() ? inline_.data() : heap_.data(); }
  const std::int64_t* data() const { return heap_.empty() ? inline_.data() : heap_.data(); }
  std::array<std::int64_t, kInline> inline_{};
  std::vector<std::int64_t> heap_;
  std::size_t size_ = 0;
};

/// Extents and the two views' strides, outermost first.
struct RowNest {
  explicit RowNest(std::size_t capacity)
      : shape(capacity), strides_a(capacity), strides_b(capacity) {}
  DimList shape, strides_a, strides_b;
};

/// The nest of `shape` simplified as above (empty: one element).
inline RowNest simplified_nest(const Shape& shape, const Shape& strides_a, const Shape& strides_b) {
  // Built innermost first, then reversed.
  RowNest n(shape.size());
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
  DimList idx(nd - 1);  // zeros
  idx.resize(nd - 1);
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
