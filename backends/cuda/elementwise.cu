// Device side of elementwise.h. Deliberately plain: no cuda_bf16.h or
// cuda_fp16.h, no templates beyond the element types, so nvcc spends seconds
// on it.
#include "backends/cuda/elementwise.h"

#include "backends/cuda/element_types.cuh"
#include "backends/cuda/slot_kernels.cuh"

#include <cstring>
#include <type_traits>

namespace dtensor::cuda_backend {
namespace {

// Element i's offsets in both tensors (row-major over the merged layout).
__device__ inline void offsets(const StridedLayout& l, long long i, long long& od, long long& os) {
  od = 0;
  os = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const long long k = i % l.sizes[d];
    i /= l.sizes[d];
    od += k * l.dst_strides[d];
    os += k * l.src_strides[d];
  }
}

template <typename D, typename S>
__global__ void copy_kernel(D* dst, const S* src, StridedLayout l) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < l.numel;
       i += 1ll * gridDim.x * blockDim.x) {
    long long od, os;
    offsets(l, i, od, os);
    dst[od] = from_f64<D>(to_f64(src[os]));
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, T value, StridedLayout l) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < l.numel;
       i += 1ll * gridDim.x * blockDim.x) {
    long long od, os;
    offsets(l, i, od, os);
    dst[od] = value;
  }
}

template <typename T>
__global__ void add_kernel(T* dst, const T* src, StridedLayout l) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < l.numel;
       i += 1ll * gridDim.x * blockDim.x) {
    long long od, os;
    offsets(l, i, od, os);
    // bf16/f16 add in f32 and round once, like the CPU Tensor::add_.
    dst[od] =
        from_f64<T>(static_cast<float>(to_f64(dst[od])) + static_cast<float>(to_f64(src[os])));
  }
}
template <>
__global__ void add_kernel<double>(double* dst, const double* src, StridedLayout l) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < l.numel;
       i += 1ll * gridDim.x * blockDim.x) {
    long long od, os;
    offsets(l, i, od, os);
    dst[od] += src[os];
  }
}

constexpr int kThreads = kSlotThreads;  // grid_for's blocks (slot_kernels.cuh)

}  // namespace

cudaError_t launch_copy(void* dst, ElemType dst_type, const void* src, ElemType src_type,
                        const StridedLayout& layout, cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(dst_type, [&](auto d) {
    using D = decltype(d);
    return with_type(src_type, [&](auto s) {
      using S = decltype(s);
      copy_kernel<D, S><<<grid_for(layout.numel), kThreads, 0, stream>>>(
          static_cast<D*>(dst), static_cast<const S*>(src), layout);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_fill(void* dst, ElemType type, double value, const StridedLayout& layout,
                        cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(type, [&](auto t) {
    using T = decltype(t);
    // The value converts on the host side of the launch, as on the CPU.
    T v;
    if constexpr (std::is_same_v<T, H16>) {
      float f = static_cast<float>(value);
      unsigned u;
      std::memcpy(&u, &f, 4);
      v.bits = detail::f32_bits_to_f16_bits(u);
    } else if constexpr (std::is_same_v<T, Bf16>) {
      float f = static_cast<float>(value);
      unsigned u;
      std::memcpy(&u, &f, 4);
      if ((u & 0x7fffffffu) > 0x7f800000u) {
        v.bits = static_cast<unsigned short>((u >> 16) | 0x40u);
      } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        v.bits = static_cast<unsigned short>(u >> 16);
      }
    } else {
      v = static_cast<T>(value);
    }
    fill_kernel<T>
        <<<grid_for(layout.numel), kThreads, 0, stream>>>(static_cast<T*>(dst), v, layout);
    return cudaGetLastError();
  });
}

cudaError_t launch_add(void* dst, const void* src, ElemType type, const StridedLayout& layout,
                       cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(type, [&](auto t) {
    using T = decltype(t);
    add_kernel<T><<<grid_for(layout.numel), kThreads, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(src), layout);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
