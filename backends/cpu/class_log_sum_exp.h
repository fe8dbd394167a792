// What cross_entropy's kernels share, with the class probabilities
// (loss_kernels.cpp) and the class indices (cross_entropy_indices_kernels.cpp):
// the log-sum-exp over the classes of one sample [C, S] (class c of position
// s at c * S + s) and the walk over the samples that hands it out (a
// sample's per-position losses are then summed by row_sum.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/parallel_region.h"

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

/// fn(sample, x, t, lse, scratch) for each sample n of x [N, C, S], with x
/// and t at the sample: t advances `target_stride` per sample (C * S for
/// class probabilities, S for class indices). Samples run on the rank's
/// threads when N * C * S >= `parallel_elements`; scratch holds S values.
template <typename T, typename Target, typename Fn>
void for_each_sample(const T* x, const Target* t, std::int64_t N, std::int64_t C, std::int64_t S,
                     std::int64_t target_stride, std::int64_t parallel_elements, Fn&& fn) {
  const bool parallel = N > 1 && N * C * S >= parallel_elements;
  parallel_region(parallel, [&] {
    std::vector<T> lse(static_cast<std::size_t>(S)), scratch(static_cast<std::size_t>(S));
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* xn = x + n * C * S;
      class_log_sum_exp(xn, C, S, scratch.data(), lse.data());
      fn(n, xn, t + n * target_stride, lse.data(), scratch.data());
    }
  });
}

}  // namespace dtensor::cpu
