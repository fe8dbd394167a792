// Launchers of the losses' device kernels (loss.cu), behind the CUDA kernels
// of the loss.* slots (loss_kernels.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/elementwise.h"
#include "dtensor/ops/kernels/pointwise_loss_terms.h"

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

/// Class-index targets: x [N, C, S], target [N, S] of int64 indices. A
/// position whose index is not ignore_index and lies in [0, C) contributes
/// (1 - smoothing) (lse - x_t) + smoothing / C sum_c (lse - x_c); the others
/// nothing. partials[kLossBlocks] = sums of the contributions.
cudaError_t launch_cross_entropy_indices_partials(ElemType t, const void* x,
                                                  const std::int64_t* target, long long n,
                                                  long long c, long long s, long long ignore_index,
                                                  double smoothing, double* partials,
                                                  cudaStream_t stream);
/// g = scale (softmax(x) - ((1 - smoothing) onehot(t) + smoothing / C)) at the
/// contributing positions, 0 elsewhere.
cudaError_t launch_cross_entropy_indices_backward(ElemType t, const void* x,
                                                  const std::int64_t* target, long long n,
                                                  long long c, long long s, long long ignore_index,
                                                  double smoothing, double scale, void* g,
                                                  cudaStream_t stream);
/// counts[4] (device f64): positions that contribute, positions out of range
/// (neither contributing nor ignore_index), the smallest and the largest
/// index out of range (+inf and -inf when there is none).
cudaError_t launch_class_index_count(const std::int64_t* target, long long n, long long classes,
                                     long long ignore_index, double* counts, cudaStream_t stream);

/// partials[kLossBlocks] = sums of the pointwise loss's term over n elements
/// (the shared formulas of pointwise_loss_terms.h; `p` beta or delta).
cudaError_t launch_pointwise_loss_partials(ElemType t, kernels::PointwiseLoss loss, const void* x,
                                           const void* target, double p, long long n,
                                           double* partials, cudaStream_t stream);
/// g = scale * the term's slope.
cudaError_t launch_pointwise_loss_backward(ElemType t, kernels::PointwiseLoss loss, const void* x,
                                           const void* target, double p, double scale, void* g,
                                           long long n, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
