// Launchers of the pools' device kernels (pool.cu), behind the CUDA kernels
// of the pool.* slots (pool_kernels.cpp). The taps come flattened as in the
// CPU kernels: three spatial dims always (missing leading ones one position
// with one tap), per dim output o reading plane offsets
// offset[start[o] .. start[o + 1]) in kernel order.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/elementwise.h"

namespace dtensor::cuda_backend {

/// The geometry of a pool on the device: pointers into device arrays.
struct PoolGeometry {
  long long planes = 0, win_plane = 1, out_plane = 1;
  long long outputs[3] = {1, 1, 1};
  const long long* start[3] = {nullptr, nullptr, nullptr};   // [outputs + 1] each
  const long long* offset[3] = {nullptr, nullptr, nullptr};  // offsets within a plane
  /// avg_pool's divisor of output (a, b, c): factor[0][a] * factor[1][b] * factor[2][c].
  const double* factor[3] = {nullptr, nullptr, nullptr};
};

/// output = the max over each output's taps (first maximum wins, NaN wins:
/// the last). With `grad_output` and `grad_window` (f64 device scratch of
/// planes * win_plane, zeroed here) instead: the gradient added at the tap
/// picked. `out` is the output then unused.
cudaError_t launch_max_pool(ElemType t, const void* window, const void* grad_output, void* out,
                            double* grad_window, const PoolGeometry& g, cudaStream_t stream);

/// output = sum over the taps / divisor.
cudaError_t launch_avg_pool_forward(ElemType t, const void* window, void* out,
                                    const PoolGeometry& g, cudaStream_t stream);
/// grad_window (f64 device scratch, zeroed here) += grad_output / divisor at every tap.
cudaError_t launch_avg_pool_backward(ElemType t, const void* grad_output, double* grad_window,
                                     const PoolGeometry& g, cudaStream_t stream);

/// dst (n elements of type t) = src (f64), rounded once.
cudaError_t launch_narrow_f64(ElemType t, const double* src, void* dst, long long n,
                              cudaStream_t stream);

}  // namespace dtensor::cuda_backend
