// Building blocks of the CPU backend's vectorised kernels.
//
// The library is built for the baseline x86-64 target (one package for every
// machine), so the hot loops are compiled again for AVX2 and AVX-512 and the
// dynamic loader picks the widest the CPU runs (GCC's target_clones, an
// ifunc). Loops inside such a function are vectorised through OpenMP's simd
// reductions, which allow reordering a float sum without -ffast-math. Sums
// run in the data's type over blocks of kSumBlock elements (16 lanes x 64
// steps for f32 on AVX-512) and add up in f64 across blocks, so a sum over a
// million f32 elements loses no more than one over a thousand.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && !defined(__clang_analyzer__) && !defined(DTENSOR_NO_TARGET_CLONES)
#define DTENSOR_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DTENSOR_SIMD_CLONES
#endif

namespace dtensor::cpu {

inline constexpr std::int64_t kSumBlock = 1024;

/// On a lambda a SIMD_CLONES function calls: inlined into each clone. Left to
/// itself GCC may compile the lambda once, for the baseline target (SSE2),
/// which it did for the norms' backward blocks (no zmm register in them).
#define DTENSOR_INLINE_LAMBDA __attribute__((always_inline))

/// Calls block(begin, end) over [0, n) in blocks of kSumBlock and sums the
/// f64 results: the per-block sums are taken in the caller's lane type.
template <typename Block>
[[gnu::always_inline]] inline double blocked_sum(std::int64_t n, Block&& block) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kSumBlock)
    total += static_cast<double>(block(b, b + kSumBlock < n ? b + kSumBlock : n));
  return total;
}

}  // namespace dtensor::cpu
