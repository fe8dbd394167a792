// An OpenMP parallel region only when it is wanted.
//
// An `omp parallel if (false)` region still enters libgomp, which makes and
// frees a one-thread team each time: an allocation and a team start for
// every small tensor's kernel call, and small tensors are most of the calls
// of a sharded step. parallel_region runs its body inline instead; the
// body's orphaned `omp for` loops then run every iteration on the calling
// thread.
#pragma once

#include <utility>

namespace dtensor::cpu {

/// Runs `body()` in a parallel region of the default thread count when
/// `parallel`, else once, inline, on this thread.
template <typename Body>
void parallel_region(bool parallel, Body&& body) {
  if (!parallel) {
    std::forward<Body>(body)();
    return;
  }
#pragma omp parallel
  body();
}

}  // namespace dtensor::cpu
