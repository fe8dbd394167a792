// CPU kernels of the optimisers and of gradient clipping
// (dtensor/ops/kernels/optim.h), f32 and f64, each in its own type.
//
// Every update follows torch.optim's single-tensor code (PyTorch 1.13)
// operation for operation, one element at a time as
// dtensor/ops/kernels/optim_update.h writes it for every backend (the CUDA
// kernels run the same functions), with every Python float in the data's type
// where PyTorch converts it, so f64 updates equal PyTorch's to rounding.
// Elements are independent: large tensors are split over the rank's threads,
// each block vectorised.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/optim.h"

namespace dtensor::cpu {
namespace {

// Tensors smaller than this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

// ---- the updates: torch's formulas, one element at a time (optim_update.h) ----

// One loop per combination of the state that may be absent, the absent
// operand a constant null: a branch on it inside the loop would keep GCC from
// vectorising the loop.
template <bool kBuf, typename T>
[[gnu::always_inline]] inline void sgd_loop(T* p, const T* g, T* buf, std::int64_t n,
                                            const kernels::SgdScalars<T>& s) {
  T* b = kBuf ? buf : nullptr;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    kernels::sgd_element(p, g, b, i, s);
}
template <bool kMax, typename T>
[[gnu::always_inline]] inline void adam_loop(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n,
                                             const kernels::AdamScalars<T>& s) {
  T* vm = kMax ? vmax : nullptr;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    kernels::adam_element(p, g, m, v, vm, i, s);
}
template <bool kCentered, bool kBuf, typename T>
[[gnu::always_inline]] inline void rmsprop_loop(T* p, const T* g, T* sq, T* ga, T* buf,
                                                std::int64_t n,
                                                const kernels::RmspropScalars<T>& s) {
  T* a = kCentered ? ga : nullptr;
  T* b = kBuf ? buf : nullptr;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    kernels::rmsprop_element(p, g, sq, a, b, i, s);
}

template <typename T>
[[gnu::always_inline]] inline void sgd_body(T* p, const T* g, T* buf, std::int64_t n,
                                            const kernels::SgdScalars<T>& s) {
  if (buf != nullptr)
    sgd_loop<true>(p, g, buf, n, s);
  else
    sgd_loop<false>(p, g, buf, n, s);
}
template <typename T>
[[gnu::always_inline]] inline void adam_body(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n,
                                             const kernels::AdamScalars<T>& s) {
  if (vmax != nullptr)
    adam_loop<true>(p, g, m, v, vmax, n, s);
  else
    adam_loop<false>(p, g, m, v, vmax, n, s);
}
template <typename T>
[[gnu::always_inline]] inline void rmsprop_body(T* p, const T* g, T* sq, T* ga, T* buf,
                                                std::int64_t n,
                                                const kernels::RmspropScalars<T>& s) {
  if (ga != nullptr && buf != nullptr)
    rmsprop_loop<true, true>(p, g, sq, ga, buf, n, s);
  else if (ga != nullptr)
    rmsprop_loop<true, false>(p, g, sq, ga, buf, n, s);
  else if (buf != nullptr)
    rmsprop_loop<false, true>(p, g, sq, ga, buf, n, s);
  else
    rmsprop_loop<false, false>(p, g, sq, ga, buf, n, s);
}

DTENSOR_SIMD_CLONES void sgd_rows(float* p, const float* g, float* buf, std::int64_t n,
                                  const kernels::SgdScalars<float>& s) {
  sgd_body(p, g, buf, n, s);
}
DTENSOR_SIMD_CLONES void sgd_rows(double* p, const double* g, double* buf, std::int64_t n,
                                  const kernels::SgdScalars<double>& s) {
  sgd_body(p, g, buf, n, s);
}
DTENSOR_SIMD_CLONES void adam_rows(float* p, const float* g, float* m, float* v, float* vmax,
                                   std::int64_t n, const kernels::AdamScalars<float>& s) {
  adam_body(p, g, m, v, vmax, n, s);
}
DTENSOR_SIMD_CLONES void adam_rows(double* p, const double* g, double* m, double* v, double* vmax,
                                   std::int64_t n, const kernels::AdamScalars<double>& s) {
  adam_body(p, g, m, v, vmax, n, s);
}
DTENSOR_SIMD_CLONES void rmsprop_rows(float* p, const float* g, float* sq, float* ga, float* buf,
                                      std::int64_t n, const kernels::RmspropScalars<float>& s) {
  rmsprop_body(p, g, sq, ga, buf, n, s);
}
DTENSOR_SIMD_CLONES void rmsprop_rows(double* p, const double* g, double* sq, double* ga,
                                      double* buf, std::int64_t n,
                                      const kernels::RmspropScalars<double>& s) {
  rmsprop_body(p, g, sq, ga, buf, n, s);
}

// ---- norms and scaling ----

template <typename T>
[[gnu::always_inline]] inline T sum_squares_body(const T* x, std::int64_t n) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (std::int64_t i = 0; i < n; ++i)
    acc += x[i] * x[i];
  return acc;
}
template <typename T>
[[gnu::always_inline]] inline T max_abs_body(const T* x, std::int64_t n) {
  // NaN wins, as torch's abs().max() returns NaN when there is one.
  T acc = 0;
  bool nan = false;
#pragma omp simd reduction(max : acc) reduction(|| : nan)
  for (std::int64_t i = 0; i < n; ++i) {
    const T a = std::abs(x[i]);
    acc = acc < a ? a : acc;
    nan = nan || std::isnan(a);
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : acc;
}
template <typename T>
[[gnu::always_inline]] inline void scale_body(T* x, T s, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = x[i] * s;
}
DTENSOR_SIMD_CLONES float sum_squares(const float* x, std::int64_t n) {
  return sum_squares_body(x, n);
}
DTENSOR_SIMD_CLONES double sum_squares(const double* x, std::int64_t n) {
  return sum_squares_body(x, n);
}
DTENSOR_SIMD_CLONES float max_abs(const float* x, std::int64_t n) {
  return max_abs_body(x, n);
}
DTENSOR_SIMD_CLONES double max_abs(const double* x, std::int64_t n) {
  return max_abs_body(x, n);
}
DTENSOR_SIMD_CLONES void scale_rows(float* x, float s, std::int64_t n) {
  scale_body(x, s, n);
}
DTENSOR_SIMD_CLONES void scale_rows(double* x, double s, std::int64_t n) {
  scale_body(x, s, n);
}

// ---- the kernels ----

template <typename T>
void run_sgd(const kernels::SgdArgs& a) {
  kernels::check_update_operands(a);
  const auto s = kernels::sgd_scalars<T>(a);
  T* p = a.param.data<T>();
  const T* g = a.grad.data<T>();
  T* buf = kernels::state_data<T>(a.momentum_buffer);
  parallel_blocks(a.param.numel(), kParallelElements, [&](std::int64_t lo, std::int64_t hi) {
    sgd_rows(p + lo, g + lo, buf ? buf + lo : nullptr, hi - lo, s);
  });
}

template <typename T>
void run_adam(const kernels::AdamArgs& a) {
  kernels::check_update_operands(a);
  const auto s = kernels::adam_scalars<T>(a);
  T* p = a.param.data<T>();
  const T* g = a.grad.data<T>();
  T* m = a.exp_avg.data<T>();
  T* v = a.exp_avg_sq.data<T>();
  T* vmax = kernels::state_data<T>(a.max_exp_avg_sq);
  parallel_blocks(a.param.numel(), kParallelElements, [&](std::int64_t lo, std::int64_t hi) {
    adam_rows(p + lo, g + lo, m + lo, v + lo, vmax ? vmax + lo : nullptr, hi - lo, s);
  });
}

template <typename T>
void run_rmsprop(const kernels::RmspropArgs& a) {
  kernels::check_update_operands(a);
  const auto s = kernels::rmsprop_scalars<T>(a);
  T* p = a.param.data<T>();
  const T* g = a.grad.data<T>();
  T* sq = a.square_avg.data<T>();
  T* ga = kernels::state_data<T>(a.grad_avg);
  T* buf = kernels::state_data<T>(a.momentum_buffer);
  parallel_blocks(a.param.numel(), kParallelElements, [&](std::int64_t lo, std::int64_t hi) {
    rmsprop_rows(p + lo, g + lo, sq + lo, ga ? ga + lo : nullptr, buf ? buf + lo : nullptr, hi - lo,
                 s);
  });
}

template <typename T>
void run_norm_part(const kernels::NormPartArgs& a) {
  kernels::check_norm_part(a);
  const T* x = a.input.data<T>();
  const std::int64_t n = a.input.numel();
  double out = 0;
  if (std::isinf(a.norm_type)) {
    for (std::int64_t b = 0; b < n; b += kSumBlock) {
      const double m = max_abs(x + b, std::min(kSumBlock, n - b));
      out = out < m || std::isnan(m) ? m : out;
    }
  } else if (a.norm_type == 2) {
    out = blocked_sum(n, [&](std::int64_t b, std::int64_t e) { return sum_squares(x + b, e - b); });
  } else {
    const T p = static_cast<T>(a.norm_type);
    out = blocked_sum(n, [&](std::int64_t b, std::int64_t e) {
      T acc = 0;
      for (std::int64_t i = b; i < e; ++i)
        acc += std::pow(std::abs(x[i]), p);
      return acc;
    });
  }
  a.result.data<double>()[0] = out;
}

template <typename T>
void run_scale_in_place(const kernels::ScaleInPlaceArgs& a) {
  check_arg(a.tensor.is_contiguous(), kernels::kScaleInPlace.name,
            "internal: the tensor is not contiguous");
  T* x = a.tensor.data<T>();
  const auto s = static_cast<T>(a.scale);
  parallel_blocks(a.tensor.numel(), kParallelElements,
                  [&](std::int64_t lo, std::int64_t hi) { scale_rows(x + lo, s, hi - lo); });
}

template <typename T>
void register_for(DType dt) {
  const auto cpu = DeviceType::CPU;
  register_kernel(kernels::kSgd, cpu, dt, KernelFunction<kernels::SgdArgs>(run_sgd<T>));
  register_kernel(kernels::kAdam, cpu, dt, KernelFunction<kernels::AdamArgs>(run_adam<T>));
  register_kernel(kernels::kRmsprop, cpu, dt, KernelFunction<kernels::RmspropArgs>(run_rmsprop<T>));
  register_kernel(kernels::kNormPart, cpu, dt,
                  KernelFunction<kernels::NormPartArgs>(run_norm_part<T>));
  register_kernel(kernels::kScaleInPlace, cpu, dt,
                  KernelFunction<kernels::ScaleInPlaceArgs>(run_scale_in_place<T>));
}

struct Registrar {
  Registrar() {
    register_for<float>(DType::F32);
    register_for<double>(DType::F64);
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
