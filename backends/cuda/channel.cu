// Device side of channel.h: the bias as a grid-stride loop in the compute
// type, the sums one block per row added in f64 in a fixed order.
#include "backends/cuda/channel.h"
#include "backends/cuda/slot_kernels.cuh"

namespace dtensor::cuda_backend {
namespace {

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, long long rows, long long c, long long inner) {
  const long long total = rows * inner;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x)
    y[e] = from_f64<T>(load_c(y, e) + load_c(bias, (e / inner) % c));
}

template <typename T>
__global__ void row_sums_kernel(const T* x, long long rows, long long inner, double* out) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double acc = 0;
    for (long long j = threadIdx.x; j < inner; j += blockDim.x)
      acc += static_cast<double>(load_c(x, r * inner + j));
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[r] = acc;
  }
}

}  // namespace

cudaError_t launch_channel_add_bias(ElemType t, void* y, const void* bias, long long rows,
                                    long long c, long long inner, cudaStream_t stream) {
  if (rows * inner == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(rows * inner), kSlotThreads, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), rows, c, inner);
    return cudaGetLastError();
  });
}

cudaError_t launch_row_sums(ElemType t, const void* x, long long rows, long long inner, double* out,
                            cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    row_sums_kernel<T><<<grid_for_rows(rows), kSlotThreads, 0, stream>>>(static_cast<const T*>(x),
                                                                         rows, inner, out);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
