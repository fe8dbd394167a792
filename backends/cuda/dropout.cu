// Device side of dropout.h: one thread per element, its global index from its
// local multi-index plus the part's offset.
#include "backends/cuda/dropout.h"
#include "backends/cuda/slot_kernels.cuh"
#include "dtensor/ops/kernels/dropout_hash.h"

namespace dtensor::cuda_backend {
namespace {

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, DropoutPart part, unsigned long long key, double p,
                               ComputeT<T> scale) {
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < part.numel;
       e += 1ll * gridDim.x * blockDim.x) {
    long long rest = e, global = 0;
    for (int d = part.ndim - 1; d >= 0; --d) {
      global += (part.offset[d] + rest % part.local[d]) * part.global_stride[d];
      rest /= part.local[d];
    }
    const bool keep = kernels::dropout_uniform(key, static_cast<unsigned long long>(global)) >= p;
    // A dropped element is +0 whatever the input, as on the CPU.
    y[e] = from_f64<T>(keep ? load_c(x, e) * scale : ComputeT<T>(0));
  }
}

}  // namespace

cudaError_t launch_dropout(ElemType type, const void* x, void* y, const DropoutPart& part,
                           std::uint64_t key, double p, double scale, cudaStream_t stream) {
  if (part.numel == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(part.numel), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), part, key, p,
        static_cast<ComputeT<T>>(scale));
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
