// The element types as CUDA kernels see them, and their conversions through
// f64, shared by the .cu files of this backend (elementwise.cu, pointwise.cu).
// Plain structs over the bits rather than cuda_bf16.h / cuda_fp16.h: nvcc
// stays fast, and the conversions are the host's own (bit for bit).
#pragma once

#include "backends/cuda/elementwise.h"
#include "dtensor/core/float16_bits.h"

namespace dtensor::cuda_backend {

// bfloat16 as its bits, converted exactly as dtensor::BFloat16 does on the host
// (round to nearest even; NaN stays a quiet NaN), so both sides agree bit for bit.
struct Bf16 {
  unsigned short bits;
};
// IEEE half as its bits, converted by the same code as dtensor::Float16
// (float16_bits.h), not cuda_fp16.h's intrinsics, so both sides agree bit for bit.
struct H16 {
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
__device__ inline double to_f64(H16 v) {
  return __uint_as_float(detail::f16_bits_to_f32_bits(v.bits));
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
template <>
__device__ inline H16 from_f64<H16>(double v) {
  return H16{detail::f32_bits_to_f16_bits(__float_as_uint(static_cast<float>(v)))};
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
    case ElemType::F16:
      return f(H16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace dtensor::cuda_backend
