// Device side of loss.h: the element-wise terms in the compute type, summed
// in f64 per thread and per block in a fixed order (kLossBlocks partials);
// cross_entropy has one thread per (sample, position) over the classes, the
// log-sum-exp as the CPU kernel computes it (maximum skipping NaN).
#include <climits>
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

__device__ inline bool contributes(long long k, long long classes, long long ignore_index) {
  return k != ignore_index && k >= 0 && k < classes;
}

template <typename T>
__global__ void cross_entropy_indices_partials_kernel(const T* x, const long long* t, long long n,
                                                      long long c, long long s, long long ignore,
                                                      double smoothing, double* partials) {
  using C = ComputeT<T>;
  const C keep = static_cast<C>(1.0 - smoothing);
  const C spread = static_cast<C>(smoothing / static_cast<double>(c));
  double acc = 0;
  for (long long p = blockIdx.x * 1ll * blockDim.x + threadIdx.x; p < n * s;
       p += 1ll * gridDim.x * blockDim.x) {
    const long long i = p / s, base = i * c * s + (p - i * s);
    const long long k = t[p];
    if (!contributes(k, c, ignore)) continue;
    const C lse = log_sum_exp(x, base, c, s);
    C all = 0;
    if (spread != C(0))
      for (long long j = 0; j < c; ++j)
        all += lse - load_c(x, base + j * s);
    acc += static_cast<double>(spread * all + keep * (lse - load_c(x, base + k * s)));
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T>
__global__ void cross_entropy_indices_backward_kernel(const T* x, const long long* t, long long n,
                                                      long long c, long long s, long long ignore,
                                                      double smoothing, double scale, T* g) {
  using C = ComputeT<T>;
  const C keep = static_cast<C>(1.0 - smoothing);
  const C spread = static_cast<C>(smoothing / static_cast<double>(c));
  const C sc = static_cast<C>(scale);
  for (long long p = blockIdx.x * 1ll * blockDim.x + threadIdx.x; p < n * s;
       p += 1ll * gridDim.x * blockDim.x) {
    const long long i = p / s, base = i * c * s + (p - i * s);
    const long long k = t[p];
    const bool counted = contributes(k, c, ignore);
    const C lse = counted ? log_sum_exp(x, base, c, s) : C(0);
    for (long long j = 0; j < c; ++j) {
      const long long e = base + j * s;
      const C onehot = j == k ? keep : C(0);
      g[e] = from_f64<T>(counted ? sc * (c_exp(load_c(x, e) - lse) - onehot - spread) : C(0));
    }
  }
}

// One block: counts, then the extremes of the indices out of range.
__global__ void class_index_count_kernel(const long long* t, long long n, long long classes,
                                         long long ignore, double* counts) {
  __shared__ long long valid[kSlotThreads], bad[kSlotThreads], lo[kSlotThreads], hi[kSlotThreads];
  long long v = 0, b = 0, l = LLONG_MAX, h = LLONG_MIN;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const long long k = t[i];
    if (contributes(k, classes, ignore)) {
      ++v;
    } else if (k != ignore) {
      ++b;
      l = k < l ? k : l;
      h = k > h ? k : h;
    }
  }
  valid[threadIdx.x] = v;
  bad[threadIdx.x] = b;
  lo[threadIdx.x] = l;
  hi[threadIdx.x] = h;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) {
      const int o = threadIdx.x + w;
      valid[threadIdx.x] += valid[o];
      bad[threadIdx.x] += bad[o];
      lo[threadIdx.x] = lo[o] < lo[threadIdx.x] ? lo[o] : lo[threadIdx.x];
      hi[threadIdx.x] = hi[o] > hi[threadIdx.x] ? hi[o] : hi[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    counts[0] = static_cast<double>(valid[0]);
    counts[1] = static_cast<double>(bad[0]);
    counts[2] = bad[0] ? static_cast<double>(lo[0]) : INFINITY;
    counts[3] = bad[0] ? static_cast<double>(hi[0]) : -INFINITY;
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

cudaError_t launch_cross_entropy_indices_partials(ElemType t, const void* x,
                                                  const std::int64_t* target, long long n,
                                                  long long c, long long s, long long ignore_index,
                                                  double smoothing, double* partials,
                                                  cudaStream_t stream) {
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_indices_partials_kernel<T><<<kLossBlocks, kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), reinterpret_cast<const long long*>(target), n, c, s, ignore_index,
        smoothing, partials);
    return cudaGetLastError();
  });
}

cudaError_t launch_cross_entropy_indices_backward(ElemType t, const void* x,
                                                  const std::int64_t* target, long long n,
                                                  long long c, long long s, long long ignore_index,
                                                  double smoothing, double scale, void* g,
                                                  cudaStream_t stream) {
  if (n * s == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_indices_backward_kernel<T><<<grid_for(n * s), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), reinterpret_cast<const long long*>(target), n, c, s, ignore_index,
        smoothing, scale, static_cast<T*>(g));
    return cudaGetLastError();
  });
}

cudaError_t launch_class_index_count(const std::int64_t* target, long long n, long long classes,
                                     long long ignore_index, double* counts, cudaStream_t stream) {
  class_index_count_kernel<<<1, kSlotThreads, 0, stream>>>(
      reinterpret_cast<const long long*>(target), n, classes, ignore_index, counts);
  return cudaGetLastError();
}

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
