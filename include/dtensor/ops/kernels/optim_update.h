// One element of each optimiser's update, written once for every backend: the
// CPU kernels run these in vectorised loops (backends/cpu/optim_kernels.cpp),
// the CUDA kernels one thread per element (backends/cuda/optim.cu), so both
// do torch.optim's single-tensor formulas operation for operation, in the same
// order and in the data's type (each tensor op there is one expression here:
// add(x, alpha=a) is self + a * x, addcmul(a, b, v) is self + v * a * b,
// addcdiv(a, b, v) is self + v * (a / b)). The scalars are the Python floats
// PyTorch computes before touching a tensor, already in the data's type
// (kernels::sgd_scalars and friends in optim.h build them from the
// arguments). Plain C++17 without the library's tensor types, so nvcc
// compiles it as it is.
#pragma once

#include <cmath>
#include <cstdint>

#include "dtensor/core/float16_bits.h"  // DTENSOR_HOST_DEVICE

// Inlined into the vectorised CPU loops (a call would stop the vector code)
// and into the CUDA kernels alike.
#if defined(__CUDACC__)
#define DTENSOR_ELEMENT_FN __forceinline__ __host__ __device__
#else
#define DTENSOR_ELEMENT_FN [[gnu::always_inline]] inline
#endif

namespace dtensor::kernels {

template <typename T>
struct SgdScalars {
  T lr, momentum, damp, wd;  // damp = 1 - dampening
  bool decay, fresh, nesterov;
};

/// param, grad and (with momentum, else null) the momentum buffer: element i.
template <typename T>
DTENSOR_ELEMENT_FN void sgd_element(T* p, const T* g0, T* buf, std::int64_t i,
                                    const SgdScalars<T>& s) {
  T g = s.decay ? g0[i] + s.wd * p[i] : g0[i];  // grad.add(param, alpha=wd)
  if (buf != nullptr) {
    // clone(g), or buf.mul_(momentum).add_(g, alpha=1 - dampening)
    buf[i] = s.fresh ? g : buf[i] * s.momentum + s.damp * g;
    g = s.nesterov ? g + s.momentum * buf[i] : buf[i];  // g.add(buf, alpha=momentum)
  }
  p[i] = p[i] + (-s.lr) * g;  // param.add_(g, alpha=-lr)
}

template <typename T>
struct AdamScalars {
  T beta1, w1, beta2, w2, wd, decay, bc2_sqrt, eps, neg_step_size;
  bool coupled, decoupled;
};

/// Adam and AdamW; vmax (max_exp_avg_sq) is null without amsgrad.
template <typename T>
DTENSOR_ELEMENT_FN void adam_element(T* p, const T* g0, T* m, T* v, T* vmax, std::int64_t i,
                                     const AdamScalars<T>& s) {
  T param = p[i];  // one load and one store: a conditional store would not vectorise
  const T g = s.coupled ? g0[i] + s.wd * param : g0[i];  // grad.add(param, alpha=wd)
  if (s.decoupled) param = param * s.decay;              // param.mul_(1 - lr * wd)
  m[i] = m[i] * s.beta1 + s.w1 * g;                      // mul_(beta1).add_(g, alpha=1-beta1)
  v[i] = v[i] * s.beta2 + s.w2 * g * g;                  // mul_(beta2).addcmul_(g, g, 1-beta2)
  T second = v[i];
  if (vmax != nullptr) {  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
    vmax[i] = vmax[i] < v[i] || std::isnan(v[i]) ? v[i] : vmax[i];
    second = vmax[i];
  }
  const T denom = std::sqrt(second) / s.bc2_sqrt + s.eps;  // (sqrt / bc2_sqrt).add_(eps)
  p[i] = param + s.neg_step_size * (m[i] / denom);         // addcdiv_(m, denom, value=-step_size)
}

template <typename T>
struct RmspropScalars {
  T alpha, w, wd, eps, momentum, neg_lr;  // w = 1 - alpha
  bool decay;
};

/// ga (grad_avg) is null unless centred, buf unless momentum > 0.
template <typename T>
DTENSOR_ELEMENT_FN void rmsprop_element(T* p, const T* g0, T* sq, T* ga, T* buf, std::int64_t i,
                                        const RmspropScalars<T>& s) {
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

}  // namespace dtensor::kernels
