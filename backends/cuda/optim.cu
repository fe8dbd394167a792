// Device side of optim.h: grid-stride kernels running the shared element
// functions of the optimisers, and the norm parts' block reduction.
#include <cmath>

#include "backends/cuda/optim.h"
#include "backends/cuda/slot_kernels.cuh"

namespace dtensor::cuda_backend {
namespace {

constexpr int kThreads = kSlotThreads;

template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, long long n, kernels::SgdScalars<T> s) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    kernels::sgd_element(p, g, buf, i, s);
}

template <typename T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, long long n,
                            kernels::AdamScalars<T> s) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    kernels::adam_element(p, g, m, v, vmax, i, s);
}

template <typename T>
__global__ void rmsprop_kernel(T* p, const T* g, T* sq, T* ga, T* buf, long long n,
                               kernels::RmspropScalars<T> s) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    kernels::rmsprop_element(p, g, sq, ga, buf, i, s);
}

// The larger of two values, a NaN in either winning (torch's max).
__device__ inline double nan_max(double a, double b) {
  return isnan(a) ? a : (isnan(b) || a < b ? b : a);
}

// |x|^p summed, or max |x| with NaN winning when `max` is set; one f64 result
// per block.
template <typename T>
__global__ void norm_partials_kernel(const T* x, long long n, double p, bool max,
                                     double* partials) {
  __shared__ double sh[kThreads];
  double acc = 0;
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x) {
    const double a = fabs(to_f64(x[i]));
    if (max)
      acc = nan_max(acc, a);
    else
      acc += p == 2 ? a * a : pow(a, p);
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) {
      const double o = sh[threadIdx.x + w];
      sh[threadIdx.x] = max ? nan_max(sh[threadIdx.x], o) : sh[threadIdx.x] + o;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

}  // namespace

template <typename T>
cudaError_t launch_sgd(T* p, const T* g, T* buf, std::int64_t n, const kernels::SgdScalars<T>& s,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sgd_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p, g, buf, n, s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_adam(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n,
                        const kernels::AdamScalars<T>& s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  adam_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p, g, m, v, vmax, n, s);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_rmsprop(T* p, const T* g, T* sq, T* ga, T* buf, std::int64_t n,
                           const kernels::RmspropScalars<T>& s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  rmsprop_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p, g, sq, ga, buf, n, s);
  return cudaGetLastError();
}

template cudaError_t launch_sgd<float>(float*, const float*, float*, std::int64_t,
                                       const kernels::SgdScalars<float>&, cudaStream_t);
template cudaError_t launch_sgd<double>(double*, const double*, double*, std::int64_t,
                                        const kernels::SgdScalars<double>&, cudaStream_t);
template cudaError_t launch_adam<float>(float*, const float*, float*, float*, float*, std::int64_t,
                                        const kernels::AdamScalars<float>&, cudaStream_t);
template cudaError_t launch_adam<double>(double*, const double*, double*, double*, double*,
                                         std::int64_t, const kernels::AdamScalars<double>&,
                                         cudaStream_t);
template cudaError_t launch_rmsprop<float>(float*, const float*, float*, float*, float*,
                                           std::int64_t, const kernels::RmspropScalars<float>&,
                                           cudaStream_t);
template cudaError_t launch_rmsprop<double>(double*, const double*, double*, double*, double*,
                                            std::int64_t, const kernels::RmspropScalars<double>&,
                                            cudaStream_t);

cudaError_t launch_norm_partials(ElemType type, const void* x, std::int64_t n, double norm_type,
                                 double* partials, cudaStream_t stream) {
  const bool max = isinf(norm_type);
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    norm_partials_kernel<T><<<kNormPartBlocks, kThreads, 0, stream>>>(static_cast<const T*>(x), n,
                                                                      norm_type, max, partials);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
