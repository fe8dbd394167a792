// CPU kernels of sigmoid and silu, forward and backward, and of tanh's
// backward, for f32 and bf16 (bf16 computed in f32 and rounded once), with
// PyTorch's formulas (dtensor/ops/kernels/elementwise_math.h): sigmoid =
// 1 / (1 + e^-x), silu = x sigmoid(x), their gradients from the input;
// tanh's gradient g (1 - tanh(x)^2) with tanh(x) = 1 - 2 / (e^2x + 1),
// exact to ~1e-7 absolute, which the gradient needs (tanh's forward, which
// needs it relative near 0, stays on oneDNN).
//
// Why not oneDNN's eltwise (which serves gelu, tanh and leaky_relu): its
// logistic and swish ran at 1.8-2.1 ms forward and 2.4-2.7 ms backward on
// 4M elements on one AVX-512 core, half PyTorch's speed (1.0 / 1.4 ms),
// and a loop calling std::exp runs one element at a time. Here e^x is
// evaluated in the vector lanes of a plain loop (exp_lanes below), which
// GCC vectorises in the AVX2 and AVX-512 clones: ~1 ulp, the same results
// in every lane and in the scalar remainder. f64 and f16 stay on
// backends/eigen/activation_kernels.cpp.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

// e^x for f32, with the special values right (e^NaN = NaN, e^-inf = 0,
// e^x = inf past ln(FLT_MAX), denormals below -87.3). x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 in two parts, so that n * kLn2Hi is exact); e^r by
// its Taylor series to degree 7 (truncation under 6e-9 relative); 2^n as
// two exponent fields, so that n down to -150 and up to 128 need no
// special case (2^n1 2^n2 underflows gradually, or overflows to inf).
[[gnu::always_inline]] inline float exp_lanes(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 15 significant bits
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // NaN fails both tests and takes -104, which keeps the int conversion
  // defined; the select at the end gives it back.
  const float xc = x > -104.0f ? (x < 89.0f ? x : 89.0f) : -104.0f;
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto ni = static_cast<std::int32_t>(n);
  const std::int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
  const float e = p * s1 * s2;
  return x != x ? x : e;
}

[[gnu::always_inline]] inline float sigmoid_lane(float x) {
  return 1.0f / (1.0f + exp_lanes(-x));
}

DTENSOR_SIMD_CLONES void sigmoid_rows(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = sigmoid_lane(x[i]);
}
DTENSOR_SIMD_CLONES void sigmoid_backward_rows(const float* g, const float* x, float* y,
                                               std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float s = sigmoid_lane(x[i]);
    y[i] = g[i] * s * (1.0f - s);
  }
}
DTENSOR_SIMD_CLONES void silu_rows(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = x[i] * sigmoid_lane(x[i]);
}
DTENSOR_SIMD_CLONES void silu_backward_rows(const float* g, const float* x, float* y,
                                            std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float s = sigmoid_lane(x[i]);
    y[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

DTENSOR_SIMD_CLONES void tanh_backward_rows(const float* g, const float* x, float* y,
                                            std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float t = 1.0f - 2.0f / (exp_lanes(2.0f * x[i]) + 1.0f);
    y[i] = g[i] * (1.0f - t * t);
  }
}

// Elements per block: planes of this size run in parallel on the rank's threads.
constexpr std::int64_t kBlock = std::int64_t{1} << 14;

LocalKernel forward(void (*rows)(const float*, float*, std::int64_t)) {
  return [rows](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& input = c.local(0);
    const Tensor x = in_compute(input);
    Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());
    compute_into(out, [&](auto, Tensor& y) {
      const float* xp = x.data<float>();
      float* yp = y.data<float>();
      const std::int64_t n = y.numel();
      parallel_region(n >= 4 * kBlock, [&] {
#pragma omp for schedule(static)
        for (std::int64_t b = 0; b < n; b += kBlock)
          rows(xp + b, yp + b, std::min(kBlock, n - b));
      });
    });
    return {out};
  };
}

LocalKernel backward(void (*rows)(const float*, const float*, float*, std::int64_t)) {
  return [rows](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& input = c.local(1);
    const Tensor g = in_compute(c.local(0)), x = in_compute(input);
    Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());
    compute_into(out, [&](auto, Tensor& y) {
      const float* gp = g.data<float>();
      const float* xp = x.data<float>();
      float* yp = y.data<float>();
      const std::int64_t n = y.numel();
      parallel_region(n >= 4 * kBlock, [&] {
#pragma omp for schedule(static)
        for (std::int64_t b = 0; b < n; b += kBlock)
          rows(gp + b, xp + b, yp + b, std::min(kBlock, n - b));
      });
    });
    return {out};
  };
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::BF16}) {
      register_kernel("sigmoid", DeviceType::CPU, dt, forward(sigmoid_rows));
      register_kernel("sigmoid_backward", DeviceType::CPU, dt, backward(sigmoid_backward_rows));
      register_kernel("silu", DeviceType::CPU, dt, forward(silu_rows));
      register_kernel("silu_backward", DeviceType::CPU, dt, backward(silu_backward_rows));
      register_kernel("tanh_backward", DeviceType::CPU, dt, backward(tanh_backward_rows));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
