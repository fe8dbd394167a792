// Launchers of the device kernels behind the pointwise operators (add, sub,
// mul, div, maximum, minimum, maximum_share, scale, relu, relu_backward) and the reductions to a
// scalar (sum, mean) on CUDA tensors. Their registration with the operator registry is in
// pointwise_kernels.cpp; the kernels are in pointwise.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/elementwise.h"

namespace dtensor::cuda_backend {

enum class PointwiseOp : int {
  Add,
  Mul,
  ReluBackward,
  Scale,
  Relu,
  Sub,
  Div,
  Maximum,
  Minimum,
  MaximumShare
};

/// out[i] = op(a[i], b[i]) for the binary ops (the formulas every backend
/// shares, dtensor/ops/kernels/elementwise_math.h), op(a[i], scalar) for Scale
/// and Relu (b unused). Dense operands of `n` elements of one type. f32, bf16 and
/// f16 compute in f32 and round once, f64 in f64 — as the CPU kernels do.
cudaError_t launch_pointwise(PointwiseOp op, ElemType type, void* out, const void* a, const void* b,
                             double scalar, std::int64_t n, cudaStream_t stream);

/// Blocks of the first pass of launch_sum, and so the doubles `partials` holds.
constexpr int kSumBlocks = 256;

/// out[0] = (sum of a's n elements) / divisor, accumulated in f64 in a fixed
/// order (kSumBlocks partial sums, then one block), so the result does not
/// change from run to run. `partials` is device scratch of kSumBlocks doubles.
cudaError_t launch_sum(ElemType type, const void* a, std::int64_t n, double divisor, void* out,
                       double* partials, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
