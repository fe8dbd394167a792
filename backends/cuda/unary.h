// Launcher of the element-wise functions of one tensor and the activations,
// forward and backward, on CUDA tensors: the formulas every backend shares
// (dtensor/ops/kernels/elementwise_math.h), one thread per element.
// Registration is in unary_kernels.cpp, the kernels in unary.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/elementwise.h"
#include "dtensor/ops/kernels/elementwise_math.h"

namespace dtensor::cuda_backend {

// The plain functions of DTENSOR_PLAIN_UNARY_FUNCTIONS by their NAME, then
// clamp, pow and the activations.
#define DTENSOR_PLAIN_FN(NAME, FUNCTION, OP, POSITIVE, LINEAR) NAME,
enum class UnaryFn : int {
  DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_FN)  //
  Clamp,
  Pow,
  LeakyRelu,
  Gelu,
  Silu,
  Sigmoid,
  Tanh,
};
#undef DTENSOR_PLAIN_FN

/// y[i] = F(g[i], x[i], s, t) for `fn` (its backward when `backward`; a
/// forward passes x as g). Dense operands of `n` elements of one type; f32
/// arithmetic for f32, bf16 and f16 (rounded once), f64 for f64.
cudaError_t launch_unary(UnaryFn fn, bool backward, ElemType type, void* y, const void* g,
                         const void* x, double s, double t, std::int64_t n, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
