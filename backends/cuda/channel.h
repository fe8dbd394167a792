// Launchers of the per-channel device kernels (channel.cu), behind the CUDA
// kernels of the channel.* slots (channel_kernels.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/elementwise.h"

namespace dtensor::cuda_backend {

/// y[i, c, j] += bias[c] in place: rows = n * c rows of `inner` elements.
cudaError_t launch_channel_add_bias(ElemType t, void* y, const void* bias, long long rows,
                                    long long c, long long inner, cudaStream_t stream);
/// out[r] = the sum of row r's `inner` elements, in f64 (device, [rows]).
cudaError_t launch_row_sums(ElemType t, const void* x, long long rows, long long inner, double* out,
                            cudaStream_t stream);

}  // namespace dtensor::cuda_backend
