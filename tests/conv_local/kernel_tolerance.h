// How far a local convolution kernel's result may be from the naive f64
// reference. Derived, not fitted: a sum of R products (operands in [-1, 1))
// accumulated in precision u makes R roundings, each at most u times a partial
// sum, and partial sums are of the size of the result, so |error| <= c*u*R*
// max(1, |result|) with a small c for blocked orders. bf16 and f16 results
// also carry one output rounding (at most 2^-8 resp. 2^-11 of the largest
// value; we allow two).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dtensor/core/dtype.h"

namespace dtensor::testing {

inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::F64:
      return std::ldexp(1.0, -53);
    case DType::F32:
      return std::ldexp(1.0, -24);
    case DType::BF16:
      return std::ldexp(1.0, -8);  // 8 significant bits
    case DType::F16:
      return std::ldexp(1.0, -11);  // 11 significant bits
    case DType::I64:                // integers are exact
      return 0;
  }
  return 1;
}

/// |result - reference| bound for sums of `terms` products bounded by 1 each,
/// accumulated in f32 at least (oneDNN accumulates bf16 in f32), with the
/// result stored in `t` (one rounding relative to the largest value).
inline double kernel_tolerance(DType t, std::int64_t terms, double ref_max) {
  const double acc_u = t == DType::F64 ? unit_roundoff(DType::F64) : unit_roundoff(DType::F32);
  const double accumulation = 4.0 * acc_u * static_cast<double>(terms + 1) * std::max(1.0, ref_max);
  const bool half = t == DType::BF16 || t == DType::F16;
  const double storage = half ? 2.0 * unit_roundoff(t) * ref_max : 0.0;
  return std::max(accumulation + storage, t == DType::F64 ? 1e-12 : 0.0);
}

}  // namespace dtensor::testing
