// What the kernel-level tests share: reading a tensor as f64 values for the
// naive loops, and the tolerance a kernel's result in each dtype has
// against them (f32 and f64 are computed in their own type; bf16 and f16 in
// f32 with one rounding of each input and of the result).
#pragma once

#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::testing_kernels {

inline std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::F64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

inline double tolerance(DType dt) {
  switch (dt) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1e-5;
    default:
      return 5e-2;
  }
}

}  // namespace dtensor::testing_kernels
