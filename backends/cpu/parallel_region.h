// OpenMP parallel regions only where they are wanted.
//
// An `omp parallel if (false)` region still enters libgomp, which makes and
// frees a one-thread team each time: an allocation and a team start for
// every small tensor's kernel call, and small tensors are most of the calls
// of a sharded step. These run the work inline instead when it is not split
// (too small, or the rank has one thread).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace dtensor::cpu {

/// Runs `body()` in a parallel region of the default thread count when
/// `parallel` and the rank has more than one thread, else once, inline, on
/// this thread; the body's orphaned `omp for` loops then run every
/// iteration here.
template <typename Body>
void parallel_region(bool parallel, Body&& body) {
  if (!parallel || omp_get_max_threads() <= 1) {
    std::forward<Body>(body)();
    return;
  }
#pragma omp parallel
  body();
}

/// Runs fn(lo, hi) over [0, n) in one contiguous block per thread when n is
/// at least `min_elements`, else fn(0, n) once, inline (no call when n is 0).
template <typename Fn>
void parallel_blocks(std::int64_t n, std::int64_t min_elements, Fn&& fn) {
  const int threads = n >= min_elements ? omp_get_max_threads() : 1;
  if (threads <= 1) {
    if (n > 0) fn(std::int64_t{0}, n);
    return;
  }
  const std::int64_t block = (n + threads - 1) / threads;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int i = 0; i < threads; ++i) {
    const std::int64_t lo = i * block, hi = std::min(n, lo + block);
    if (lo < hi) fn(lo, hi);
  }
}

}  // namespace dtensor::cpu
