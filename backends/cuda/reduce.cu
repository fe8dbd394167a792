// Device side of reduce.h: one thread per result (folds, moments) or per
// element (expand, tie mask), each finding its offsets from the layout's
// strides.
#include <cmath>

#include "backends/cuda/reduce.h"
#include "backends/cuda/slot_kernels.cuh"

namespace dtensor::cuda_backend {
namespace {

template <typename T>
__global__ void fold_kernel(ReduceFold fold, const T* x, T* out, ReduceLayout L, double scale) {
  for (long long r = blockIdx.x * 1ll * blockDim.x + threadIdx.x; r < L.results;
       r += 1ll * gridDim.x * blockDim.x) {
    const long long base = reduce_offset_over(L, r, false);
    double acc = fold == ReduceFold::Sum ? 0.0 : (fold == ReduceFold::Max ? -INFINITY : INFINITY);
    for (long long k = 0; k < L.per_result; ++k) {
      const double v = to_f64(x[base + reduce_offset_over(L, k, true)]);
      if (fold == ReduceFold::Sum)
        acc += v;
      else if ((fold == ReduceFold::Max ? v > acc : v < acc) || isnan(v))
        acc = isnan(acc) ? acc : v;
    }
    out[r] = from_f64<T>(fold == ReduceFold::Sum ? acc * scale : acc);
  }
}

template <typename T>
__global__ void expand_kernel(const T* g, T* out, ReduceLayout L, double scale) {
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < L.numel;
       e += 1ll * gridDim.x * blockDim.x)
    out[e] = from_f64<T>(to_f64(g[reduce_result_of(L, e)]) * scale);
}

template <typename T>
__global__ void tie_mask_kernel(const T* x, const T* result, T* out, ReduceLayout L) {
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < L.numel;
       e += 1ll * gridDim.x * blockDim.x)
    out[e] = from_f64<T>(to_f64(x[e]) == to_f64(result[reduce_result_of(L, e)]) ? 1.0 : 0.0);
}

template <typename T>
__global__ void moments_kernel(const T* x, double* moments, ReduceLayout L) {
  for (long long r = blockIdx.x * 1ll * blockDim.x + threadIdx.x; r < L.results;
       r += 1ll * gridDim.x * blockDim.x) {
    const long long base = reduce_offset_over(L, r, false);
    double n = 0, mean = 0, m2 = 0;
    for (long long k = 0; k < L.per_result; ++k) {
      const double v = to_f64(x[base + reduce_offset_over(L, k, true)]);
      n += 1;
      const double d = v - mean;
      mean += d / n;
      m2 += d * (v - mean);
    }
    moments[3 * r] = n;
    moments[3 * r + 1] = mean;
    moments[3 * r + 2] = m2;
  }
}

}  // namespace

cudaError_t launch_reduce_fold(ReduceFold fold, ElemType type, const void* x, void* out,
                               const ReduceLayout& layout, double scale, cudaStream_t stream) {
  if (layout.results == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    fold_kernel<T><<<grid_for(layout.results), kSlotThreads, 0, stream>>>(
        fold, static_cast<const T*>(x), static_cast<T*>(out), layout, scale);
    return cudaGetLastError();
  });
}

cudaError_t launch_reduce_expand(ElemType type, const void* g, void* out,
                                 const ReduceLayout& layout, double scale, cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    expand_kernel<T><<<grid_for(layout.numel), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(g), static_cast<T*>(out), layout, scale);
    return cudaGetLastError();
  });
}

cudaError_t launch_reduce_tie_mask(ElemType type, const void* x, const void* result, void* out,
                                   const ReduceLayout& layout, cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    tie_mask_kernel<T><<<grid_for(layout.numel), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(result), static_cast<T*>(out), layout);
    return cudaGetLastError();
  });
}

cudaError_t launch_reduce_moments(ElemType type, const void* x, double* moments,
                                  const ReduceLayout& layout, cudaStream_t stream) {
  if (layout.results == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    moments_kernel<T><<<grid_for(layout.results), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), moments, layout);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
