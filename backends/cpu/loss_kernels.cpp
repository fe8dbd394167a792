// CPU kernels of the losses (dtensor/ops/kernels/loss.h): f32 and f64 in
// their own type, bf16 and f16 widened to f32 (and the gradient rounded once).
//
// Sums run in the data's type over blocks of kSumBlock elements and add up
// in f64 across blocks (simd.h), so the f64 losses match a plain f64 loop to
// rounding and the f32 ones lose no more over a million elements than over a
// thousand. cross_entropy works on one sample [C, S] at a time with the
// positions S as the inner, contiguous loop (class c of position s is at
// c * S + s); samples run on the rank's threads, each into its own partial
// sum, added in sample order so the result does not depend on the threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/class_log_sum_exp.h"
#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/row_sum.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/loss.h"

namespace dtensor::cpu {
namespace {

// Elements below this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

// sum((x - t)^2) over one block, and g = s * (x - t): one body each,
// inlined into plain functions per type that carry the AVX2 / AVX-512 clones
// (as norm_rows.cpp does).
template <typename C>
[[gnu::always_inline]] inline C squared_error_body(const C* x, const C* t, std::int64_t n) {
  C acc = 0;
#pragma omp simd reduction(+ : acc)
  for (std::int64_t j = 0; j < n; ++j)
    acc += (x[j] - t[j]) * (x[j] - t[j]);
  return acc;
}
template <typename C>
[[gnu::always_inline]] inline void scaled_error_body(const C* x, const C* t, C s, C* g,
                                                     std::int64_t n) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j)
    g[j] = s * (x[j] - t[j]);
}
DTENSOR_SIMD_CLONES float squared_error(const float* x, const float* t, std::int64_t n) {
  return squared_error_body(x, t, n);
}
DTENSOR_SIMD_CLONES double squared_error(const double* x, const double* t, std::int64_t n) {
  return squared_error_body(x, t, n);
}
DTENSOR_SIMD_CLONES void scaled_error(const float* x, const float* t, float s, float* g,
                                      std::int64_t n) {
  scaled_error_body(x, t, s, g, n);
}
DTENSOR_SIMD_CLONES void scaled_error(const double* x, const double* t, double s, double* g,
                                      std::int64_t n) {
  scaled_error_body(x, t, s, g, n);
}

// The elementwise gradient over the whole tensor, in parallel blocks when it pays.
template <typename T>
void scaled_error_blocks(const T* x, const T* t, T s, T* g, std::int64_t n) {
  parallel_blocks(n, kParallelElements, [&](std::int64_t lo, std::int64_t hi) {
    scaled_error(x + lo, t + lo, s, g + lo, hi - lo);
  });
}

template <typename T>
double cross_entropy_sum(const Tensor& input, const Tensor& target) {
  const Shape& shape = input.shape();
  const std::int64_t C = shape.at(1);
  const std::int64_t S = shape_numel(shape) / std::max<std::int64_t>(shape[0] * C, 1);
  std::vector<double> per_sample(static_cast<std::size_t>(shape[0]), 0.0);
  for_each_sample(input.data<T>(), target.data<T>(), shape[0], C, S, C * S, kParallelElements,
                  [&](std::int64_t n, const T* x, const T* t, const T* lse, T* loss) {
                    std::fill(loss, loss + S, T(0));
                    for (std::int64_t k = 0; k < C; ++k) {
                      const T* xk = x + k * S;
                      const T* tk = t + k * S;
#pragma omp simd
                      for (std::int64_t s = 0; s < S; ++s)
                        loss[s] -= tk[s] * (xk[s] - lse[s]);
                    }
                    per_sample[static_cast<std::size_t>(n)] = row_sum(loss, S);
                  });
  double total = 0;
  for (double v : per_sample)
    total += v;
  return total;
}

template <typename T>
void cross_entropy_backward(const Tensor& input, const Tensor& target, double scale,
                            Tensor& grad_input) {
  const Shape& shape = input.shape();
  const std::int64_t C = shape.at(1);
  const std::int64_t S = shape_numel(shape) / std::max<std::int64_t>(shape[0] * C, 1);
  const T* x0 = input.data<T>();
  T* g0 = grad_input.data<T>();
  const auto sc = static_cast<T>(scale);
  for_each_sample(x0, target.data<T>(), shape[0], C, S, C * S, kParallelElements,
                  [&](std::int64_t n, const T* x, const T* t, const T* lse, T* tsum) {
                    T* g = g0 + n * C * S;
                    std::fill(tsum, tsum + S, T(0));
                    for (std::int64_t k = 0; k < C; ++k) {
                      const T* tk = t + k * S;
#pragma omp simd
                      for (std::int64_t s = 0; s < S; ++s)
                        tsum[s] += tk[s];
                    }
                    for (std::int64_t k = 0; k < C; ++k) {
                      const std::int64_t o = k * S;
                      for (std::int64_t s = 0; s < S; ++s)
                        g[o + s] = sc * (std::exp(x[o + s] - lse[s]) * tsum[s] - t[o + s]);
                    }
                  });
}

void run_mse(const kernels::MseLossArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kMseLoss.name);
  const Tensor x = in_compute(a.input), t = in_compute(a.target);
  double sum = 0;
  in_type(x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T* pt = t.data<T>();
    sum = blocked_sum(x.numel(), [&](std::int64_t b, std::int64_t e) {
      return squared_error(px + b, pt + b, e - b);
    });
  });
  kernels::put_loss_sum(a.sum, sum, kernels::kMseLoss.name);
}

void run_mse_backward(const kernels::MseLossBackwardArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kMseLossBackward.name);
  const Tensor x = in_compute(a.input), t = in_compute(a.target);
  compute_into(a.grad_input, [&](auto z, Tensor& g) {
    using T = decltype(z);
    scaled_error_blocks(x.data<T>(), t.data<T>(), static_cast<T>(a.scale), g.data<T>(), x.numel());
  });
}

void run_cross_entropy(const kernels::CrossEntropyArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kCrossEntropy.name);
  const Tensor x = in_compute(a.input), t = in_compute(a.target);
  double sum = 0;
  in_type(x.dtype(), [&](auto z) { sum = cross_entropy_sum<decltype(z)>(x, t); });
  kernels::put_loss_sum(a.sum, sum, kernels::kCrossEntropy.name);
}

void run_cross_entropy_backward(const kernels::CrossEntropyBackwardArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kCrossEntropyBackward.name);
  const Tensor x = in_compute(a.input), t = in_compute(a.target);
  compute_into(a.grad_input,
               [&](auto z, Tensor& g) { cross_entropy_backward<decltype(z)>(x, t, a.scale, g); });
}

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kMseLoss, cpu, dt, KernelFunction<kernels::MseLossArgs>(run_mse));
      register_kernel(kernels::kMseLossBackward, cpu, dt,
                      KernelFunction<kernels::MseLossBackwardArgs>(run_mse_backward));
      register_kernel(kernels::kCrossEntropy, cpu, dt,
                      KernelFunction<kernels::CrossEntropyArgs>(run_cross_entropy));
      register_kernel(
          kernels::kCrossEntropyBackward, cpu, dt,
          KernelFunction<kernels::CrossEntropyBackwardArgs>(run_cross_entropy_backward));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
