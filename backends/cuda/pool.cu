// Device side of pool.h: one thread per output, its taps in kernel order.
// The backward passes scatter into f64 scratch with atomicAdd (overlapping
// windows share inputs), then round once into the gradient's type; the order
// of those additions varies from run to run, at f64 rounding.
#include "backends/cuda/pool.h"
#include "backends/cuda/slot_kernels.cuh"

namespace dtensor::cuda_backend {
namespace {

// Output `o` of a plane as its indices per dim.
__device__ inline void split_output(const PoolGeometry& g, long long o, long long idx[3]) {
  idx[2] = o % g.outputs[2];
  o /= g.outputs[2];
  idx[1] = o % g.outputs[1];
  idx[0] = o / g.outputs[1];
}

// fn(offset in plane) over output idx's taps, in kernel order.
template <typename Fn>
__device__ inline void for_each_tap(const PoolGeometry& g, const long long idx[3], Fn&& fn) {
  for (long long i = g.start[0][idx[0]]; i < g.start[0][idx[0] + 1]; ++i)
    for (long long j = g.start[1][idx[1]]; j < g.start[1][idx[1] + 1]; ++j) {
      const long long base = g.offset[0][i] + g.offset[1][j];
      for (long long k = g.start[2][idx[2]]; k < g.start[2][idx[2] + 1]; ++k)
        fn(base + g.offset[2][k]);
    }
}

__device__ inline double divisor_of(const PoolGeometry& g, const long long idx[3]) {
  double n = 1;
  for (int d = 0; d < 3; ++d)
    n *= g.factor[d][idx[d]];
  return n;
}

template <typename T>
__global__ void max_pool_kernel(const T* x, const T* gy, T* y, double* gx, PoolGeometry g) {
  using C = ComputeT<T>;
  const long long total = g.planes * g.out_plane;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x) {
    const long long p = e / g.out_plane;
    long long idx[3];
    split_output(g, e - p * g.out_plane, idx);
    const T* plane = x + p * g.win_plane;
    C best = -static_cast<C>(INFINITY);
    long long at = -1;
    for_each_tap(g, idx, [&](long long off) {
      const C v = load_c(plane, off);
      if (at < 0) at = off;
      // A strictly greater value or any NaN takes the place: equal maxima
      // keep the first in kernel order, the last NaN wins (PyTorch's rule).
      if (v > best || isnan(v)) {
        best = v;
        at = off;
      }
    });
    if (gx) {
      if (at >= 0) atomicAdd(gx + p * g.win_plane + at, to_f64(gy[e]));
    } else {
      y[e] = from_f64<T>(best);
    }
  }
}

template <typename T>
__global__ void avg_forward_kernel(const T* x, T* y, PoolGeometry g) {
  using C = ComputeT<T>;
  const long long total = g.planes * g.out_plane;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x) {
    const long long p = e / g.out_plane;
    long long idx[3];
    split_output(g, e - p * g.out_plane, idx);
    const T* plane = x + p * g.win_plane;
    double sum = 0;
    for_each_tap(g, idx, [&](long long off) { sum += static_cast<double>(load_c(plane, off)); });
    y[e] = from_f64<T>(static_cast<C>(sum / divisor_of(g, idx)));
  }
}

template <typename T>
__global__ void avg_backward_kernel(const T* gy, double* gx, PoolGeometry g) {
  using C = ComputeT<T>;
  const long long total = g.planes * g.out_plane;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x) {
    const long long p = e / g.out_plane;
    long long idx[3];
    split_output(g, e - p * g.out_plane, idx);
    const double share = static_cast<C>(to_f64(gy[e]) / divisor_of(g, idx));
    double* plane = gx + p * g.win_plane;
    for_each_tap(g, idx, [&](long long off) { atomicAdd(plane + off, share); });
  }
}

template <typename T>
__global__ void narrow_kernel(const double* src, T* dst, long long n) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    dst[i] = from_f64<T>(src[i]);
}

cudaError_t zero(double* p, long long n, cudaStream_t stream) {
  return cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(double), stream);
}

}  // namespace

cudaError_t launch_max_pool(ElemType t, const void* window, const void* grad_output, void* out,
                            double* grad_window, const PoolGeometry& g, cudaStream_t stream) {
  if (grad_window) {
    const cudaError_t e = zero(grad_window, g.planes * g.win_plane, stream);
    if (e != cudaSuccess) return e;
  }
  const long long total = g.planes * g.out_plane;
  if (total == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<grid_for(total), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(window), static_cast<const T*>(grad_output), static_cast<T*>(out),
        grad_window, g);
    return cudaGetLastError();
  });
}

cudaError_t launch_avg_pool_forward(ElemType t, const void* window, void* out,
                                    const PoolGeometry& g, cudaStream_t stream) {
  const long long total = g.planes * g.out_plane;
  if (total == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    avg_forward_kernel<T><<<grid_for(total), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(window), static_cast<T*>(out), g);
    return cudaGetLastError();
  });
}

cudaError_t launch_avg_pool_backward(ElemType t, const void* grad_output, double* grad_window,
                                     const PoolGeometry& g, cudaStream_t stream) {
  const cudaError_t e = zero(grad_window, g.planes * g.win_plane, stream);
  if (e != cudaSuccess) return e;
  const long long total = g.planes * g.out_plane;
  if (total == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    avg_backward_kernel<T><<<grid_for(total), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(grad_output), grad_window, g);
    return cudaGetLastError();
  });
}

cudaError_t launch_narrow_f64(ElemType t, const double* src, void* dst, long long n,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    narrow_kernel<T><<<grid_for(n), kSlotThreads, 0, stream>>>(src, static_cast<T*>(dst), n);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
