#include "backends/cpu/row_sum.h"

#include "backends/cpu/simd.h"

namespace dtensor::cpu {
namespace {

// Inlined into each SIMD clone below: a lambda compiled on its own gets the
// baseline target only (DTENSOR_INLINE_LAMBDA, simd.h).
template <typename T>
[[gnu::always_inline]] inline double blocked_row_sum(const T* x, std::int64_t n) {
  return blocked_sum(n, [&](std::int64_t b, std::int64_t e) DTENSOR_INLINE_LAMBDA {
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (std::int64_t j = b; j < e; ++j)
      acc += x[j];
    return acc;
  });
}

}  // namespace

DTENSOR_SIMD_CLONES double row_sum(const float* x, std::int64_t n) {
  return blocked_row_sum(x, n);
}
DTENSOR_SIMD_CLONES double row_sum(const double* x, std::int64_t n) {
  return blocked_row_sum(x, n);
}

}  // namespace dtensor::cpu
