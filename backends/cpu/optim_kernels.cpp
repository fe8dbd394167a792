// CPU kernels of the optimisers and of gradient clipping
// (dtensor/ops/kernels/optim.h), f32 and f64, each in its own type.
//
// Every update follows torch.optim's single-tensor code (PyTorch 1.13)
// operation for operation: each tensor op there is one expression here, in
// the same order (add(x, alpha=a) is x' = self + a * x, addcmul(a, b, v) is
// self + v * a * b, addcdiv(a, b, v) is self + v * (a / b)), and every
// Python float becomes the data's type where PyTorch converts it, so f64
// updates equal PyTorch's to rounding. Elements are independent: large
// tensors are split over the rank's threads, each block vectorised.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/optim.h"

namespace dtensor::cpu {
namespace {

// Tensors smaller than this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

// fn(begin, end) over [0, n) in one block per thread when it pays.
template <typename Fn>
void in_blocks(std::int64_t n, Fn&& fn) {
  const int threads = n >= kParallelElements ? omp_get_max_threads() : 1;
  const std::int64_t block = (n + threads - 1) / std::max(threads, 1);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int i = 0; i < threads; ++i) {
    const std::int64_t lo = i * block, hi = std::min(n, lo + block);
    if (lo < hi) fn(lo, hi);
  }
}

// ---- SGD ----

template <typename T>
struct SgdScalars {
  T lr, momentum, damp, wd;  // damp = 1 - dampening
  bool decay, fresh, nesterov;
};

template <typename T>
[[gnu::always_inline]] inline void sgd_body(T* p, const T* g0, T* buf, std::int64_t n,
                                            const SgdScalars<T>& s) {
  if (buf == nullptr) {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) {
      const T g = s.decay ? g0[i] + s.wd * p[i] : g0[i];  // grad.add(param, alpha=wd)
      p[i] = p[i] + (-s.lr) * g;                          // param.add_(g, alpha=-lr)
    }
    return;
  }
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    T g = s.decay ? g0[i] + s.wd * p[i] : g0[i];
    // clone(g), or buf.mul_(momentum).add_(g, alpha=1 - dampening)
    buf[i] = s.fresh ? g : buf[i] * s.momentum + s.damp * g;
    g = s.nesterov ? g + s.momentum * buf[i] : buf[i];  // g.add(buf, alpha=momentum)
    p[i] = p[i] + (-s.lr) * g;
  }
}
DTENSOR_SIMD_CLONES void sgd_rows(float* p, const float* g, float* buf, std::int64_t n,
                                  const SgdScalars<float>& s) {
  sgd_body(p, g, buf, n, s);
}
DTENSOR_SIMD_CLONES void sgd_rows(double* p, const double* g, double* buf, std::int64_t n,
                                  const SgdScalars<double>& s) {
  sgd_body(p, g, buf, n, s);
}

// ---- Adam, AdamW ----

template <typename T>
struct AdamScalars {
  T beta1, w1, beta2, w2, wd, decay, bc2_sqrt, eps, neg_step_size;
  bool coupled, decoupled;
};

template <typename T>
[[gnu::always_inline]] inline void adam_body(T* p, const T* g0, T* m, T* v, T* vmax, std::int64_t n,
                                             const AdamScalars<T>& s) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = s.coupled ? g0[i] + s.wd * p[i] : g0[i];  // grad.add(param, alpha=wd)
    if (s.decoupled) p[i] = p[i] * s.decay;               // param.mul_(1 - lr * wd)
    m[i] = m[i] * s.beta1 + s.w1 * g;                     // mul_(beta1).add_(g, alpha=1-beta1)
    v[i] = v[i] * s.beta2 + s.w2 * g * g;                 // mul_(beta2).addcmul_(g, g, 1-beta2)
    T second = v[i];
    if (vmax != nullptr) {  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
      vmax[i] = vmax[i] < v[i] || std::isnan(v[i]) ? v[i] : vmax[i];
      second = vmax[i];
    }
    const T denom = std::sqrt(second) / s.bc2_sqrt + s.eps;  // (sqrt / bc2_sqrt).add_(eps)
    p[i] = p[i] + s.neg_step_size * (m[i] / denom);          // addcdiv_(m, denom, value=-step_size)
  }
}
DTENSOR_SIMD_CLONES void adam_rows(float* p, const float* g, float* m, float* v, float* vmax,
                                   std::int64_t n, const AdamScalars<float>& s) {
  adam_body(p, g, m, v, vmax, n, s);
}
DTENSOR_SIMD_CLONES void adam_rows(double* p, const double* g, double* m, double* v, double* vmax,
                                   std::int64_t n, const AdamScalars<double>& s) {
  adam_body(p, g, m, v, vmax, n, s);
}

// ---- RMSprop ----

template <typename T>
struct RmspropScalars {
  T alpha, w, wd, eps, momentum, neg_lr;  // w = 1 - alpha
  bool decay;
};

template <typename T>
[[gnu::always_inline]] inline void rmsprop_body(T* p, const T* g0, T* sq, T* ga, T* buf,
                                                std::int64_t n, const RmspropScalars<T>& s) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = s.decay ? g0[i] + s.wd * p[i] : g0[i];  // grad.add(param, alpha=wd)
    sq[i] = sq[i] * s.alpha + s.w * g * g;              // mul_(alpha).addcmul_(g, g, 1-alpha)
    T avg;
    if (ga != nullptr) {
      ga[i] = ga[i] * s.alpha + s.w * g;               // mul_(alpha).add_(g, alpha=1-alpha)
      avg = std::sqrt(sq[i] + T(-1) * ga[i] * ga[i]);  // addcmul(ga, ga, value=-1).sqrt_()
    } else {
      avg = std::sqrt(sq[i]);
    }
    avg = avg + s.eps;
    if (buf != nullptr) {
      buf[i] = buf[i] * s.momentum + T(1) * (g / avg);  // mul_(momentum).addcdiv_(g, avg)
      p[i] = p[i] + s.neg_lr * buf[i];                  // add_(buf, alpha=-lr)
    } else {
      p[i] = p[i] + s.neg_lr * (g / avg);  // addcdiv_(g, avg, value=-lr)
    }
  }
}
DTENSOR_SIMD_CLONES void rmsprop_rows(float* p, const float* g, float* sq, float* ga, float* buf,
                                      std::int64_t n, const RmspropScalars<float>& s) {
  rmsprop_body(p, g, sq, ga, buf, n, s);
}
DTENSOR_SIMD_CLONES void rmsprop_rows(double* p, const double* g, double* sq, double* ga,
                                      double* buf, std::int64_t n,
                                      const RmspropScalars<double>& s) {
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

void check_like(const Tensor& t, const Tensor& param, const char* what, const char* slot) {
  DTENSOR_CHECK_ARG(t.shape() == param.shape() && t.dtype() == param.dtype() && t.is_contiguous(),
                    slot, "internal: {} is {} {}, the parameter {} {} (both contiguous)", what,
                    shape_str(t.shape()), dtype_name(t.dtype()), shape_str(param.shape()),
                    dtype_name(param.dtype()));
}
template <typename T>
T* data_of(const std::optional<Tensor>& t) {
  return t ? t->data<T>() : nullptr;
}

template <typename T>
void run_sgd(const kernels::SgdArgs& a) {
  const char* slot = kernels::kSgd.name;
  check_like(a.param, a.param, "param", slot);
  check_like(a.grad, a.param, "grad", slot);
  if (a.momentum_buffer) check_like(*a.momentum_buffer, a.param, "momentum_buffer", slot);
  const SgdScalars<T> s{static_cast<T>(a.lr),
                        static_cast<T>(a.momentum),
                        static_cast<T>(1 - a.dampening),
                        static_cast<T>(a.weight_decay),
                        a.weight_decay != 0,
                        a.fresh_buffer,
                        a.nesterov};
  T* p = a.param.data<T>();
  const T* g = a.grad.data<T>();
  T* buf = data_of<T>(a.momentum_buffer);
  in_blocks(a.param.numel(), [&](std::int64_t lo, std::int64_t hi) {
    sgd_rows(p + lo, g + lo, buf ? buf + lo : nullptr, hi - lo, s);
  });
}

template <typename T>
void run_adam(const kernels::AdamArgs& a) {
  const char* slot = kernels::kAdam.name;
  check_like(a.param, a.param, "param", slot);
  check_like(a.grad, a.param, "grad", slot);
  check_like(a.exp_avg, a.param, "exp_avg", slot);
  check_like(a.exp_avg_sq, a.param, "exp_avg_sq", slot);
  if (a.max_exp_avg_sq) check_like(*a.max_exp_avg_sq, a.param, "max_exp_avg_sq", slot);
  check_arg(a.step >= 1, slot, "internal: step {} (steps count from 1)", a.step);
  // Python floats, as torch computes them before touching a tensor.
  const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  const AdamScalars<T> s{static_cast<T>(a.beta1),
                         static_cast<T>(1 - a.beta1),
                         static_cast<T>(a.beta2),
                         static_cast<T>(1 - a.beta2),
                         static_cast<T>(a.weight_decay),
                         static_cast<T>(1 - a.lr * a.weight_decay),
                         static_cast<T>(std::sqrt(bc2)),
                         static_cast<T>(a.eps),
                         static_cast<T>(-(a.lr / bc1)),
                         !a.decoupled_weight_decay && a.weight_decay != 0,
                         a.decoupled_weight_decay && a.weight_decay != 0};
  T* p = a.param.data<T>();
  const T* g = a.grad.data<T>();
  T* m = a.exp_avg.data<T>();
  T* v = a.exp_avg_sq.data<T>();
  T* vmax = data_of<T>(a.max_exp_avg_sq);
  in_blocks(a.param.numel(), [&](std::int64_t lo, std::int64_t hi) {
    adam_rows(p + lo, g + lo, m + lo, v + lo, vmax ? vmax + lo : nullptr, hi - lo, s);
  });
}

template <typename T>
void run_rmsprop(const kernels::RmspropArgs& a) {
  const char* slot = kernels::kRmsprop.name;
  check_like(a.param, a.param, "param", slot);
  check_like(a.grad, a.param, "grad", slot);
  check_like(a.square_avg, a.param, "square_avg", slot);
  if (a.grad_avg) check_like(*a.grad_avg, a.param, "grad_avg", slot);
  if (a.momentum_buffer) check_like(*a.momentum_buffer, a.param, "momentum_buffer", slot);
  const RmspropScalars<T> s{
      static_cast<T>(a.alpha), static_cast<T>(1 - a.alpha), static_cast<T>(a.weight_decay),
      static_cast<T>(a.eps),   static_cast<T>(a.momentum),  static_cast<T>(-a.lr),
      a.weight_decay != 0};
  T* p = a.param.data<T>();
  const T* g = a.grad.data<T>();
  T* sq = a.square_avg.data<T>();
  T* ga = data_of<T>(a.grad_avg);
  T* buf = data_of<T>(a.momentum_buffer);
  in_blocks(a.param.numel(), [&](std::int64_t lo, std::int64_t hi) {
    rmsprop_rows(p + lo, g + lo, sq + lo, ga ? ga + lo : nullptr, buf ? buf + lo : nullptr, hi - lo,
                 s);
  });
}

template <typename T>
void run_norm_part(const kernels::NormPartArgs& a) {
  const char* slot = kernels::kNormPart.name;
  check_arg(a.input.is_contiguous(), slot, "internal: the input is not contiguous");
  DTENSOR_CHECK_ARG(a.result.dtype() == DType::F64 && a.result.numel() == 1 &&
                        a.result.device().type == DeviceType::CPU,
                    slot, "internal: the result goes into a 0-d f64 CPU tensor, got {} {}",
                    dtype_name(a.result.dtype()), shape_str(a.result.shape()));
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
  in_blocks(a.tensor.numel(),
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
