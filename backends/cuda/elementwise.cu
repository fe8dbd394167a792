// Device side of elementwise.h. Deliberately plain: no cuda_bf16.h, no
// templates beyond the element types, so nvcc spends seconds on it.
#include "backends/cuda/elementwise.h"

#include <cstring>

namespace dtensor::cuda_backend {
namespace {

// bfloat16 as its bits, converted exactly as dtensor::BFloat16 does on the host
// (round to nearest even; NaN stays a quiet NaN), so both sides agree bit for bit.
struct Bf16 {
  unsigned short bits;
};

__device__ inline double to_f64(float v) {
  return v;
}
__device__ inline double to_f64(double v) {
  return v;
}
__device__ inline double to_f64(Bf16 v) {
  return __uint_as_float(static_cast<unsigned>(v.bits) << 16);
}

template <typename T>
__device__ inline T from_f64(double v);
template <>
__device__ inline float from_f64<float>(double v) {
  return static_cast<float>(v);
}
template <>
__device__ inline double from_f64<double>(double v) {
  return v;
}
template <>
__device__ inline Bf16 from_f64<Bf16>(double v) {
  unsigned u = __float_as_uint(static_cast<float>(v));
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<unsigned short>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<unsigned short>(u >> 16)};
}

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
    // bf16 adds in f32 and rounds once, like the CPU Tensor::add_.
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

constexpr int kThreads = 256;
unsigned blocks_for(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}

template <typename F>
cudaError_t with_type(ElemType t, F&& f) {
  switch (t) {
    case ElemType::F32:
      return f(float{});
    case ElemType::F64:
      return f(double{});
    case ElemType::BF16:
      return f(Bf16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_copy(void* dst, ElemType dst_type, const void* src, ElemType src_type,
                        const StridedLayout& layout, cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(dst_type, [&](auto d) {
    using D = decltype(d);
    return with_type(src_type, [&](auto s) {
      using S = decltype(s);
      copy_kernel<D, S><<<blocks_for(layout.numel), kThreads, 0, stream>>>(
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
    if constexpr (sizeof(T) == 2) {
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
        <<<blocks_for(layout.numel), kThreads, 0, stream>>>(static_cast<T*>(dst), v, layout);
    return cudaGetLastError();
  });
}

cudaError_t launch_add(void* dst, const void* src, ElemType type, const StridedLayout& layout,
                       cudaStream_t stream) {
  if (layout.numel == 0) return cudaSuccess;
  return with_type(type, [&](auto t) {
    using T = decltype(t);
    add_kernel<T><<<blocks_for(layout.numel), kThreads, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(src), layout);
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
