// What the kernel-level tests share: reading a tensor as f64 values for the
// naive loops, and the tolerance a kernel's result in each dtype has
// against them (f32 and f64 are computed in their own type; bf16 and f16 in
// f32 with one rounding of each input and of the result).
#pragma once

#include <algorithm>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::testing_kernels {

inline std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::F64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

/// `shape` grown by 2 in every dim: the tensor a view of `shape` sits inside.
inline Shape grown(const Shape& shape) {
  Shape s = shape;
  for (auto& d : s)
    d += 2;
  return s;
}
/// The view of `shape` inside `big` (grown(shape)), one position in along
/// every dim: every stride differs from its contiguous value, and the
/// last dim stays contiguous, as a tile of a halo window or a band of an
/// output is.
inline Tensor inner_view(Tensor big, const Shape& shape) {
  for (std::size_t d = 0; d < shape.size(); ++d)
    big = big.narrow(static_cast<std::int64_t>(d), 1, shape[d]);
  return big;
}
/// Whether `big` holds `value` everywhere outside inner_view(big, shape).
inline bool untouched_outside(const Tensor& big, const Shape& shape, double value) {
  Tensor copy = big.to(DType::F64);
  inner_view(copy, shape).fill_(value);
  const std::vector<double> v = values(copy);
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == value; });
}

inline double tolerance(DType dt) {
  switch (dt) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1e-5;
    default:
      return 5e-2;
  }
}

}  // namespace dtensor::testing_kernels
