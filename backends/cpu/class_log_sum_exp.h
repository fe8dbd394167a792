// The log-sum-exp over the classes of one sample [C, S] (class c of position
// s at c * S + s): the common first pass of cross_entropy's kernels, with
// the class probabilities (loss_kernels.cpp) and the class indices
// (cross_entropy_indices_kernels.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dtensor::cpu {

/// lse[s] = log sum_c exp(x[c * S + s]) for s < S (m: S values of scratch).
/// The maximum skips NaN as std::max does; a NaN input still makes its
/// position's sum NaN through exp.
template <typename T>
void class_log_sum_exp(const T* x, std::int64_t C, std::int64_t S, T* m, T* lse) {
  std::fill(m, m + S, -std::numeric_limits<T>::infinity());
  std::fill(lse, lse + S, T(0));
  for (std::int64_t k = 0; k < C; ++k) {
    const T* xk = x + k * S;
#pragma omp simd
    for (std::int64_t s = 0; s < S; ++s)
      m[s] = m[s] < xk[s] ? xk[s] : m[s];
  }
  for (std::int64_t k = 0; k < C; ++k) {
    const T* xk = x + k * S;
    for (std::int64_t s = 0; s < S; ++s)
      lse[s] += std::exp(xk[s] - m[s]);
  }
  for (std::int64_t s = 0; s < S; ++s)
    lse[s] = m[s] + std::log(lse[s]);
}

}  // namespace dtensor::cpu
