// Walks two equally shaped strided views in row-major order, one innermost
// row at a time, so element-wise kernels see (pointer offsets, row length,
// row strides) and can use a tight loop or memcpy for dense rows.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/shape.h"

namespace dtensor::detail {

template <typename RowFn>
void for_each_row(const Shape& shape, const Shape& strides_a, std::int64_t offset_a,
                  const Shape& strides_b, std::int64_t offset_b, RowFn&& row) {
  const std::size_t nd = shape.size();
  for (auto e : shape)
    if (e == 0) return;
  if (nd == 0) {
    row(offset_a, offset_b, std::int64_t{1}, std::int64_t{1}, std::int64_t{1});
    return;
  }
  const std::int64_t inner = shape[nd - 1];
  const std::int64_t sa = strides_a[nd - 1], sb = strides_b[nd - 1];
  std::vector<std::int64_t> idx(nd - 1, 0);
  std::int64_t oa = offset_a, ob = offset_b;
  while (true) {
    row(oa, ob, inner, sa, sb);
    // Advance the outer multi-index like an odometer.
    std::size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < shape[d]) {
        oa += strides_a[d];
        ob += strides_b[d];
        break;
      }
      oa -= strides_a[d] * (shape[d] - 1);
      ob -= strides_b[d] * (shape[d] - 1);
      idx[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

}  // namespace dtensor::detail
