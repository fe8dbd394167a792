// Device side of upsample.h: one thread per output, its outer taps (dims 0
// and 1) combined into a weight as the CPU kernel's row bases, the last
// dim's one or two taps inside, in the compute type. The backward scatters
// into f64 scratch with atomicAdd (neighbouring outputs share inputs); the
// gradient is rounded once into its type afterwards (pool.h's narrow).
#include "backends/cuda/slot_kernels.cuh"
#include "backends/cuda/upsample.h"

namespace dtensor::cuda_backend {
namespace {

// fn(offset in the plane of dims 0 and 1, their weight) in the CPU kernel's
// order, for output (a, b) of those dims.
template <typename Fn>
__device__ inline void for_each_base(const ResampleGeometry& g, long long a, long long b, Fn&& fn) {
  for (int ta = 0; ta < g.taps[0]; ++ta)
    for (int tb = 0; tb < g.taps[1]; ++tb)
      fn((ta ? g.i1[0][a] : g.i0[0][a]) * g.stride[0] +
             (tb ? g.i1[1][b] : g.i0[1][b]) * g.stride[1],
         (ta ? g.w1[0][a] : g.w0[0][a]) * (tb ? g.w1[1][b] : g.w0[1][b]));
}

template <typename T>
__global__ void forward_kernel(const T* x, T* y, ResampleGeometry g) {
  using C = ComputeT<T>;
  const long long total = g.planes * g.out_plane;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x) {
    const long long p = e / g.out_plane;
    long long o = e - p * g.out_plane;
    const long long c = o % g.outputs[2];
    o /= g.outputs[2];
    const long long b = o % g.outputs[1], a = o / g.outputs[1];
    const T* plane = x + p * g.win_plane;
    const C w0 = static_cast<C>(g.w0[2][c]);
    const C w1 = g.taps[2] == 2 ? static_cast<C>(g.w1[2][c]) : C(0);
    C acc = 0;
    for_each_base(g, a, b, [&](long long base, double wb) {
      const C w = static_cast<C>(wb);
      if (g.taps[2] == 1)
        acc += w * (w0 * load_c(plane, base + g.i0[2][c]));
      else
        acc += w * (w0 * load_c(plane, base + g.i0[2][c]) + w1 * load_c(plane, base + g.i1[2][c]));
    });
    y[e] = from_f64<T>(acc);
  }
}

template <typename T>
__global__ void backward_kernel(const T* gy, double* gx, ResampleGeometry g) {
  using C = ComputeT<T>;
  const long long total = g.planes * g.out_plane;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x) {
    const long long p = e / g.out_plane;
    long long o = e - p * g.out_plane;
    const long long c = o % g.outputs[2];
    o /= g.outputs[2];
    const long long b = o % g.outputs[1], a = o / g.outputs[1];
    double* plane = gx + p * g.win_plane;
    const C v = load_c(gy, e);
    const C w0 = static_cast<C>(g.w0[2][c]);
    const C w1 = g.taps[2] == 2 ? static_cast<C>(g.w1[2][c]) : C(0);
    for_each_base(g, a, b, [&](long long base, double wb) {
      const C w = static_cast<C>(wb);
      atomicAdd(plane + base + g.i0[2][c], static_cast<double>(w * w0 * v));
      if (g.taps[2] == 2) atomicAdd(plane + base + g.i1[2][c], static_cast<double>(w * w1 * v));
    });
  }
}

}  // namespace

cudaError_t launch_upsample_forward(ElemType t, const void* window, void* out,
                                    const ResampleGeometry& g, cudaStream_t stream) {
  const long long total = g.planes * g.out_plane;
  if (total == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<grid_for(total), kSlotThreads, 0, stream>>>(static_cast<const T*>(window),
                                                                    static_cast<T*>(out), g);
    return cudaGetLastError();
  });
}

cudaError_t launch_upsample_backward(ElemType t, const void* grad_output, double* grad_window,
                                     const ResampleGeometry& g, cudaStream_t stream) {
  const cudaError_t z = cudaMemsetAsync(
      grad_window, 0, static_cast<size_t>(g.planes * g.win_plane) * sizeof(double), stream);
  if (z != cudaSuccess) return z;
  const long long total = g.planes * g.out_plane;
  if (total == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<T><<<grid_for(total), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(grad_output), grad_window, g);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
