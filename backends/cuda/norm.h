// Launchers of the normalisations' device kernels (norm.cu), behind the
// CUDA kernels of the norm.* slots (norm_kernels.cpp, which merges the rows'
// results into statistics on the host as the CPU kernels do).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/elementwise.h"

namespace dtensor::cuda_backend {

/// kernels::NormLayout's fields, for the device.
struct NormDims {
  long long n = 0, c = 0, s = 0, stats_per_sample = 0, group_size = 1;
  bool elementwise_affine = false;
};

/// Per row (n * c rows of s): out[2r] = mean, out[2r + 1] = M2 (device f64).
cudaError_t launch_norm_row_moments(ElemType t, const void* x, const NormDims& d, double* out,
                                    cudaStream_t stream);

/// y = (x - mean) * invstd * w + b (w, b of the data's type, null: none;
/// per channel or per element), then max(y, 0) when relu. mean, invstd:
/// device f64 [stats].
cudaError_t launch_norm_apply(ElemType t, const void* x, void* y, const NormDims& d,
                              const double* mean, const double* invstd, const void* w,
                              const void* b, bool relu, cudaStream_t stream);

/// Per row, g = dy * w: out[4r ..] = mean, M2, sum(g), sum(g * (x - mean)).
/// relu_y (every backward here; null: none): a fused relu's output, where
/// dy counts only if it is positive (or NaN).
cudaError_t launch_norm_row_backward_reduce(ElemType t, const void* dy, const void* x,
                                            const NormDims& d, const void* w, double* out,
                                            const void* relu_y, cudaStream_t stream);

/// The statistics of the backward's second pass (device f64 [stats]; mean_g
/// and mean_gxhat null for constant statistics).
struct NormBackwardStats {
  const double *mean = nullptr, *invstd = nullptr, *mean_g = nullptr, *mean_gxhat = nullptr;
};

/// Per-channel weight: gx (null: not wanted) = invstd * (g - mean_g - xhat *
/// mean_gxhat), and per row out[2r ..] = sum(dy), sum(dy * (x - mean)).
cudaError_t launch_norm_backward_apply_rows(ElemType t, const void* dy, const void* x, void* gx,
                                            const NormDims& d, const NormBackwardStats& st,
                                            const void* w, double* out, const void* relu_y,
                                            cudaStream_t stream);

/// Per-element weight (layer_norm): gx as above (null: not wanted), and
/// gw[p] = sum over samples of dy * xhat, gb[p] = sum of dy (device f64
/// [c * s]; null: not wanted).
cudaError_t launch_norm_backward_apply_elementwise(ElemType t, const void* dy, const void* x,
                                                   void* gx, const NormDims& d,
                                                   const NormBackwardStats& st, const void* w,
                                                   double* gw, double* gb, const void* relu_y,
                                                   cudaStream_t stream);

}  // namespace dtensor::cuda_backend
