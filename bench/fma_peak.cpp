// Per-core FMA peak of the machine it runs on: independent fused multiply-add chains on
// the widest vectors the compiler targets, one thread (pin with taskset or
// run one per core). The benchmark suite reports convolution GFLOP/s against it.
//
//   build/bin/dtensor-bench-fma [--seconds 1]   -> prints GFLOP/s (f32)
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// 16 independent accumulators hide the FMA latency (4 cycles x 2 ports).
#if defined(__AVX512F__)
using V = __m512;
constexpr int kLanes = 16;
inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V splat(float x) { return _mm512_set1_ps(x); }
inline float sum(V v) {
  float t[16];
  _mm512_storeu_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
inline V add(V a, V b) { return _mm512_add_ps(a, b); }
#else
using V = __m256;
constexpr int kLanes = 8;
inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V splat(float x) { return _mm256_set1_ps(x); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline float sum(V v) {
  float t[8];
  _mm256_storeu_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
#endif

constexpr int kChains = 16;

float run(long iters, float seed) {
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = splat(seed + static_cast<float>(i));
  const V a = splat(0.999999f), b = splat(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], a, b);
  V total = acc[0];
  for (int i = 1; i < kChains; ++i) total = add(total, acc[i]);
  return sum(total);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  using Clock = std::chrono::steady_clock;
  long iters = 1 << 20;
  double best = 0;
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  volatile float sink = 0;
  while (Clock::now() < until) {
    const auto t = Clock::now();
    sink = sink + run(iters, 1.0f);
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    const double gflops = 2.0 * kLanes * kChains * static_cast<double>(iters) / s / 1e9;
    if (gflops > best) best = gflops;
  }
  std::printf("{\"fma_peak_gflops_f32\": %.1f, \"vector_lanes\": %d}\n", best, kLanes);
  return sink == 12345.0f ? 1 : 0;
}
