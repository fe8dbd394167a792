// Launchers of the losses' device kernels (loss.cu), behind the CUDA kernels
// of the loss.* slots (loss_kernels.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/elementwise.h"

namespace dtensor::cuda_backend {

/// Blocks of the loss sums, and so the f64 partial sums they write (added
/// on the host in block order).
constexpr int kLossBlocks = 256;

/// partials[kLossBlocks] = sums of (x - t)^2 over n elements.
cudaError_t launch_mse_partials(ElemType t, const void* x, const void* target, long long n,
                                double* partials, cudaStream_t stream);
/// g = scale * (x - t).
cudaError_t launch_mse_backward(ElemType t, const void* x, const void* target, double scale,
                                void* g, long long n, cudaStream_t stream);

/// x, target [N, C, S] (classes at stride S): partials[kLossBlocks] = sums
/// of -target * log_softmax(x over C).
cudaError_t launch_cross_entropy_partials(ElemType t, const void* x, const void* target,
                                          long long n, long long c, long long s, double* partials,
                                          cudaStream_t stream);
/// g = scale * (softmax(x) * sum_c target - target).
cudaError_t launch_cross_entropy_backward(ElemType t, const void* x, const void* target,
                                          double scale, void* g, long long n, long long c,
                                          long long s, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
