// The CPU kernels' compute types: f32 and f64 data are computed in their own
// type; bf16 and f16 are widened to f32 once per call and the result rounded
// once on the way out, so a kernel is written for float and double only.
#pragma once

#include "dtensor/core/tensor.h"

namespace dtensor::cpu {

/// The type a kernel computes `d` in: f64 as it is, everything else as f32.
inline DType compute_dtype(DType d) {
  return d == DType::F64 ? DType::F64 : DType::F32;
}
/// `t` contiguous in its compute type (no copy when it is already).
inline Tensor in_compute(const Tensor& t) {
  return t.dtype() == compute_dtype(t.dtype()) ? t.contiguous() : t.to(compute_dtype(t.dtype()));
}
/// `t` as a kernel that reads through strides takes it: itself, any strides,
/// when its dtype is the compute type (a view read where it lies); bf16 and
/// f16 widened (contiguous).
inline Tensor in_compute_strided(const Tensor& t) {
  return t.dtype() == compute_dtype(t.dtype()) ? t : t.to(compute_dtype(t.dtype()));
}
/// Runs body(T{}) with T the compute type (float or double) of `dtype`.
template <typename Body>
void in_type(DType dtype, Body&& body) {
  if (compute_dtype(dtype) == DType::F64)
    body(double{});
  else
    body(float{});
}

/// Computes the output `out` in its compute type: body(T{}, buffer) with T
/// float or double, and buffer `out` itself when it is of that type, else an
/// f32 buffer of its shape that is rounded into `out` afterwards. With
/// `keep_values` (a kernel that adds into `out`) that buffer starts as
/// `out`'s values.
template <typename Body>
void compute_into(const Tensor& out, Body&& body, bool keep_values = false) {
  const bool direct = out.dtype() == compute_dtype(out.dtype());
  Tensor buffer = direct        ? out
                  : keep_values ? out.to(DType::F32)
                                : Tensor::empty(out.shape(), DType::F32);
  in_type(out.dtype(), [&](auto t) { body(t, buffer); });
  if (!direct) {
    Tensor dst = out;
    dst.copy_(buffer);
  }
}

}  // namespace dtensor::cpu
