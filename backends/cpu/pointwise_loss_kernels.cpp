// CPU kernels of the pointwise losses (l1, smooth_l1, huber,
// binary_cross_entropy_with_logits; dtensor/ops/kernels/loss.h): f32 and f64
// in their own type, bf16 and f16 widened to f32 (and the gradient rounded
// once).
//
// Each loss is a term and its slope per element, written once for every
// backend (`kernels::PointwiseTerm`, dtensor/ops/kernels/pointwise_loss_terms.h;
// the CUDA kernels run the same); the loops over them are `omp simd` loops with the loss
// chosen outside the loop, in one function per type and direction that
// carries the AVX2 / AVX-512 clones (as loss_kernels.cpp). Sums run in the
// data's type over blocks and add up in f64 across blocks (simd.h).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/loss.h"

namespace dtensor::cpu {
namespace {

using kernels::PointwiseLoss;

// Elements below this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

using kernels::PointwiseTerm;

template <PointwiseLoss L, typename C>
[[gnu::always_inline]] inline C term_sum_body(const C* x, const C* t, C p, std::int64_t n) {
  C acc = 0;
#pragma omp simd reduction(+ : acc)
  for (std::int64_t j = 0; j < n; ++j)
    acc += PointwiseTerm<L, C>::term(x[j], t[j], p);
  return acc;
}

template <PointwiseLoss L, typename C>
[[gnu::always_inline]] inline void slope_body(const C* x, const C* t, C p, C s, C* g,
                                              std::int64_t n) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j)
    g[j] = s * PointwiseTerm<L, C>::slope(x[j], t[j], p);
}

template <typename C>
[[gnu::always_inline]] inline C term_sum_of(PointwiseLoss l, const C* x, const C* t, C p,
                                            std::int64_t n) {
  switch (kernels::effective_loss(l, p)) {
    case PointwiseLoss::L1:
      return term_sum_body<PointwiseLoss::L1>(x, t, p, n);
    case PointwiseLoss::SmoothL1:
      return term_sum_body<PointwiseLoss::SmoothL1>(x, t, p, n);
    case PointwiseLoss::Huber:
      return term_sum_body<PointwiseLoss::Huber>(x, t, p, n);
    case PointwiseLoss::BceWithLogits:
      return term_sum_body<PointwiseLoss::BceWithLogits>(x, t, p, n);
  }
  return C(0);
}

template <typename C>
[[gnu::always_inline]] inline void slopes_of(PointwiseLoss l, const C* x, const C* t, C p, C s,
                                             C* g, std::int64_t n) {
  switch (kernels::effective_loss(l, p)) {
    case PointwiseLoss::L1:
      slope_body<PointwiseLoss::L1>(x, t, p, s, g, n);
      break;
    case PointwiseLoss::SmoothL1:
      slope_body<PointwiseLoss::SmoothL1>(x, t, p, s, g, n);
      break;
    case PointwiseLoss::Huber:
      slope_body<PointwiseLoss::Huber>(x, t, p, s, g, n);
      break;
    case PointwiseLoss::BceWithLogits:
      slope_body<PointwiseLoss::BceWithLogits>(x, t, p, s, g, n);
      break;
  }
}

DTENSOR_SIMD_CLONES float term_sum(PointwiseLoss l, const float* x, const float* t, float p,
                                   std::int64_t n) {
  return term_sum_of(l, x, t, p, n);
}
DTENSOR_SIMD_CLONES double term_sum(PointwiseLoss l, const double* x, const double* t, double p,
                                    std::int64_t n) {
  return term_sum_of(l, x, t, p, n);
}
DTENSOR_SIMD_CLONES void slopes(PointwiseLoss l, const float* x, const float* t, float p, float s,
                                float* g, std::int64_t n) {
  slopes_of(l, x, t, p, s, g, n);
}
DTENSOR_SIMD_CLONES void slopes(PointwiseLoss l, const double* x, const double* t, double p,
                                double s, double* g, std::int64_t n) {
  slopes_of(l, x, t, p, s, g, n);
}

void run_pointwise_loss(const kernels::PointwiseLossArgs& a) {
  const char* slot = kernels::kPointwiseLoss.name;
  kernels::check_target_shape(a.input, a.target, slot);
  const Tensor x = in_compute(a.input), t = in_compute(a.target);
  double sum = 0;
  in_type(x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T* pt = t.data<T>();
    const auto p = static_cast<T>(a.param);
    sum = blocked_sum(x.numel(), [&](std::int64_t b, std::int64_t e) {
      return term_sum(a.loss, px + b, pt + b, p, e - b);
    });
  });
  kernels::put_loss_sum(a.sum, sum, slot);
}

void run_pointwise_loss_backward(const kernels::PointwiseLossBackwardArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kPointwiseLossBackward.name);
  const Tensor x = in_compute(a.input), t = in_compute(a.target);
  compute_into(a.grad_input, [&](auto z, Tensor& g) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T* pt = t.data<T>();
    T* pg = g.data<T>();
    const auto p = static_cast<T>(a.param);
    const auto s = static_cast<T>(a.scale);
    const std::int64_t n = x.numel();
    parallel_blocks(n, kParallelElements, [&](std::int64_t lo, std::int64_t hi) {
      slopes(a.loss, px + lo, pt + lo, p, s, pg + lo, hi - lo);
    });
  });
}

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kPointwiseLoss, cpu, dt,
                      KernelFunction<kernels::PointwiseLossArgs>(run_pointwise_loss));
      register_kernel(
          kernels::kPointwiseLossBackward, cpu, dt,
          KernelFunction<kernels::PointwiseLossBackwardArgs>(run_pointwise_loss_backward));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
