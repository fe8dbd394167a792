// What the device side of the kernel slots' CUDA kernels (norm.cu, pool.cu,
// channel.cu, loss.cu, upsample.cu) shares: the compute type of an element
// type (f32 for f32, bf16 and f16, f64 for f64, as the CPU kernels), launch
// shapes, and a deterministic block sum in f64.
#pragma once

#include "backends/cuda/element_types.cuh"

namespace dtensor::cuda_backend {

constexpr int kSlotThreads = 256;  // a multiple of 32

template <typename T>
struct ComputeOf {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};
template <typename T>
using ComputeT = typename ComputeOf<T>::type;

/// An element in its compute type (exact: f32 holds every bf16 and f16).
template <typename T>
__device__ inline ComputeT<T> load_c(const T* p, long long i) {
  return static_cast<ComputeT<T>>(to_f64(p[i]));
}

/// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(long long n) {
  const long long b = (n + kSlotThreads - 1) / kSlotThreads;
  return static_cast<unsigned>(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}
/// Blocks for a loop with one block per row.
inline unsigned grid_for_rows(long long rows) {
  return static_cast<unsigned>(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535);
}

/// The sum of every thread's `v` over the block, returned to all threads,
/// added in a fixed order (so a result does not change from run to run).
/// Every thread of the block must call it.
__device__ inline double block_sum(double v) {
  __shared__ double warp_sums[32];
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();  // the previous call's readers are done with warp_sums
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0;
  for (unsigned w = 0; w < blockDim.x / 32; ++w)
    total += warp_sums[w];
  return total;
}

/// A mean as two C values, hi + lo, as the CPU kernels subtract it
/// (backends/cpu/norm_rows.cpp): (x - hi) - lo.
template <typename C>
struct SplitMean {
  C hi, lo;
  __device__ explicit SplitMean(double m)
      : hi(static_cast<C>(m)), lo(static_cast<C>(m - static_cast<double>(hi))) {}
  __device__ C centre(C x) const { return (x - hi) - lo; }
};

}  // namespace dtensor::cuda_backend
