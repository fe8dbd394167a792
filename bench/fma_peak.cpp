// Per-core FMA peak of the machine it runs on: independent fused multiply-add
// chains on the widest vectors the CPU runs (AVX-512 when the CPU has it,
// else AVX2 + FMA; chosen at run time, whatever the compiler targets, since
// oneDNN's kernels choose at run time too and a peak measured on narrower
// vectors would put them above 100%), one thread (pin with taskset or run
// one per core). The benchmark suite reports convolution GFLOP/s against it.
// Where the CPU has AVX512-BF16, also the bf16 peak: its dot-product
// instruction does two multiply-adds per f32 lane, so oneDNN's bf16
// convolutions are measured against that, not against the f32 peak.
//
//   build/bin/dtensor-bench-fma [--seconds 1]   -> prints GFLOP/s (f32)
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// 16 independent accumulators hide the FMA latency (4 cycles x 2 ports).
constexpr int kChains = 16;

__attribute__((target("avx512f"))) float run512(long iters, float seed) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i)
    acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i)
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i)
    total = _mm512_add_ps(total, acc[i]);
  float t[16];
  _mm512_storeu_ps(t, total);
  float sum = 0;
  for (float x : t)
    sum += x;
  return sum;
}

// vdpbf16ps: acc += a.lo * b.lo + a.hi * b.hi per f32 lane (4 flops per lane).
__attribute__((target("avx512f,avx512bf16"))) float run512_bf16(long iters, float seed) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i)
    acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i)
    total = _mm512_add_ps(total, acc[i]);
  float t[16];
  _mm512_storeu_ps(t, total);
  float sum = 0;
  for (float x : t)
    sum += x;
  return sum;
}

__attribute__((target("avx2,fma"))) float run256(long iters, float seed) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i)
    acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i)
      acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 total = acc[0];
  for (int i = 1; i < kChains; ++i)
    total = _mm256_add_ps(total, acc[i]);
  float t[8];
  _mm256_storeu_ps(t, total);
  float sum = 0;
  for (float x : t)
    sum += x;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  __builtin_cpu_init();
  const bool wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "dtensor-bench-fma: this CPU has neither AVX-512 nor AVX2 + FMA\n");
    return 2;
  }
  const int lanes = wide ? 16 : 8;
  using Clock = std::chrono::steady_clock;
  long iters = 1 << 20;
  double best = 0;
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  volatile float sink = 0;
  while (Clock::now() < until) {
    const auto t = Clock::now();
    sink = sink + (wide ? run512(iters, 1.0f) : run256(iters, 1.0f));
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    const double gflops = 2.0 * lanes * kChains * static_cast<double>(iters) / s / 1e9;
    if (gflops > best) best = gflops;
  }
  // The bf16 dot-product peak, where the CPU has it.
  double best_bf16 = 0;
  if (wide && __builtin_cpu_supports("avx512bf16")) {
    const auto until_bf16 = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until_bf16) {
      const auto t = Clock::now();
      sink = sink + run512_bf16(iters, 1.0f);
      const double s = std::chrono::duration<double>(Clock::now() - t).count();
      const double gflops = 4.0 * lanes * kChains * static_cast<double>(iters) / s / 1e9;
      if (gflops > best_bf16) best_bf16 = gflops;
    }
  }
  if (best_bf16 > 0)
    std::printf(
        "{\"fma_peak_gflops_f32\": %.1f, \"vector_lanes\": %d, "
        "\"dot_peak_gflops_bf16\": %.1f}\n",
        best, lanes, best_bf16);
  else
    std::printf("{\"fma_peak_gflops_f32\": %.1f, \"vector_lanes\": %d}\n", best, lanes);
  return sink == 12345.0f ? 1 : 0;
}
