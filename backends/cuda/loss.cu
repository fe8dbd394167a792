// Device side of loss.h: the element-wise terms in the compute type, summed
// in f64 per thread and per block in a fixed order (kLossBlocks partials);
// cross_entropy has one thread per (sample, position) over the classes, the
// log-sum-exp as the CPU kernel computes it (maximum skipping NaN).
#include <type_traits>

#include "backends/cuda/loss.h"
#include "backends/cuda/slot_kernels.cuh"

namespace dtensor::cuda_backend {
namespace {

__device__ inline float c_exp(float v) {
  return expf(v);
}
__device__ inline double c_exp(double v) {
  return exp(v);
}
__device__ inline float c_log(float v) {
  return logf(v);
}
__device__ inline double c_log(double v) {
  return log(v);
}

template <typename T>
__global__ void mse_partials_kernel(const T* x, const T* t, long long n, double* partials) {
  using C = ComputeT<T>;
  double acc = 0;
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x) {
    const C d = load_c(x, i) - load_c(t, i);
    acc += static_cast<double>(d * d);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T>
__global__ void mse_backward_kernel(const T* x, const T* t, double scale, T* g, long long n) {
  using C = ComputeT<T>;
  const C s = static_cast<C>(scale);
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    g[i] = from_f64<T>(s * (load_c(x, i) - load_c(t, i)));
}

// The log-sum-exp over the classes of position (sample at `base`, stride s).
template <typename T>
__device__ ComputeT<T> log_sum_exp(const T* x, long long base, long long c, long long s) {
  using C = ComputeT<T>;
  C m = -static_cast<C>(INFINITY);
  for (long long k = 0; k < c; ++k) {
    const C v = load_c(x, base + k * s);
    m = m < v ? v : m;
  }
  C sum = 0;
  for (long long k = 0; k < c; ++k)
    sum += c_exp(load_c(x, base + k * s) - m);
  return m + c_log(sum);
}

template <typename T>
__global__ void cross_entropy_partials_kernel(const T* x, const T* t, long long n, long long c,
                                              long long s, double* partials) {
  using C = ComputeT<T>;
  double acc = 0;
  for (long long p = blockIdx.x * 1ll * blockDim.x + threadIdx.x; p < n * s;
       p += 1ll * gridDim.x * blockDim.x) {
    const long long i = p / s, base = i * c * s + (p - i * s);
    const C lse = log_sum_exp(x, base, c, s);
    C loss = 0;
    for (long long k = 0; k < c; ++k)
      loss -= load_c(t, base + k * s) * (load_c(x, base + k * s) - lse);
    acc += static_cast<double>(loss);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* x, const T* t, double scale, T* g,
                                              long long n, long long c, long long s) {
  using C = ComputeT<T>;
  const C sc = static_cast<C>(scale);
  for (long long p = blockIdx.x * 1ll * blockDim.x + threadIdx.x; p < n * s;
       p += 1ll * gridDim.x * blockDim.x) {
    const long long i = p / s, base = i * c * s + (p - i * s);
    const C lse = log_sum_exp(x, base, c, s);
    C tsum = 0;
    for (long long k = 0; k < c; ++k)
      tsum += load_c(t, base + k * s);
    for (long long k = 0; k < c; ++k) {
      const long long e = base + k * s;
      g[e] = from_f64<T>(sc * (c_exp(load_c(x, e) - lse) * tsum - load_c(t, e)));
    }
  }
}

template <typename T, kernels::PointwiseLoss L>
__global__ void pointwise_loss_partials_kernel(const T* x, const T* t, ComputeT<T> p, long long n,
                                               double* partials) {
  double acc = 0;
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    acc += static_cast<double>(
        kernels::PointwiseTerm<L, ComputeT<T>>::term(load_c(x, i), load_c(t, i), p));
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T, kernels::PointwiseLoss L>
__global__ void pointwise_loss_backward_kernel(const T* x, const T* t, ComputeT<T> p,
                                               ComputeT<T> scale, T* g, long long n) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    g[i] = from_f64<T>(
        scale * kernels::PointwiseTerm<L, ComputeT<T>>::slope(load_c(x, i), load_c(t, i), p));
}

// f(std::integral_constant<PointwiseLoss, L>) for the loss that runs (smooth
// l1 with beta 0 runs as l1).
template <typename F>
cudaError_t with_loss(kernels::PointwiseLoss loss, double p, F&& f) {
  using kernels::PointwiseLoss;
  switch (kernels::effective_loss(loss, p)) {
    case PointwiseLoss::L1:
      return f(std::integral_constant<PointwiseLoss, PointwiseLoss::L1>{});
    case PointwiseLoss::SmoothL1:
      return f(std::integral_constant<PointwiseLoss, PointwiseLoss::SmoothL1>{});
    case PointwiseLoss::Huber:
      return f(std::integral_constant<PointwiseLoss, PointwiseLoss::Huber>{});
    case PointwiseLoss::BceWithLogits:
      return f(std::integral_constant<PointwiseLoss, PointwiseLoss::BceWithLogits>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_pointwise_loss_partials(ElemType t, kernels::PointwiseLoss loss, const void* x,
                                           const void* target, double p, long long n,
                                           double* partials, cudaStream_t stream) {
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    return with_loss(loss, p, [&](auto l) {
      pointwise_loss_partials_kernel<T, decltype(l)::value>
          <<<kLossBlocks, kSlotThreads, 0, stream>>>(static_cast<const T*>(x),
                                                     static_cast<const T*>(target),
                                                     static_cast<ComputeT<T>>(p), n, partials);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_pointwise_loss_backward(ElemType t, kernels::PointwiseLoss loss, const void* x,
                                           const void* target, double p, double scale, void* g,
                                           long long n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    return with_loss(loss, p, [&](auto l) {
      pointwise_loss_backward_kernel<T, decltype(l)::value>
          <<<grid_for(n), kSlotThreads, 0, stream>>>(
              static_cast<const T*>(x), static_cast<const T*>(target), static_cast<ComputeT<T>>(p),
              static_cast<ComputeT<T>>(scale), static_cast<T*>(g), n);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_mse_partials(ElemType t, const void* x, const void* target, long long n,
                                double* partials, cudaStream_t stream) {
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    mse_partials_kernel<T><<<kLossBlocks, kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(target), n, partials);
    return cudaGetLastError();
  });
}

cudaError_t launch_mse_backward(ElemType t, const void* x, const void* target, double scale,
                                void* g, long long n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    mse_backward_kernel<T><<<grid_for(n), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(target), scale, static_cast<T*>(g), n);
    return cudaGetLastError();
  });
}

cudaError_t launch_cross_entropy_partials(ElemType t, const void* x, const void* target,
                                          long long n, long long c, long long s, double* partials,
                                          cudaStream_t stream) {
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_partials_kernel<T><<<kLossBlocks, kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(target), n, c, s, partials);
    return cudaGetLastError();
  });
}

cudaError_t launch_cross_entropy_backward(ElemType t, const void* x, const void* target,
                                          double scale, void* g, long long n, long long c,
                                          long long s, cudaStream_t stream) {
  if (n * s == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<grid_for(n * s), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(target), scale, static_cast<T*>(g), n, c,
        s);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
