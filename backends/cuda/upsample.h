// Launchers of upsample's device kernels (upsample.cu), behind the CUDA
// kernels of the upsample.* slots (upsample_kernels.cpp). The taps come as
// in the CPU kernel: three spatial dims always (missing leading ones one
// position with one tap of weight 1), output o of dim d reading i0[d][o]
// with weight w0[d][o] and, when taps[d] == 2, i1[d][o] with w1[d][o].
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/elementwise.h"

namespace dtensor::cuda_backend {

/// The geometry of an interpolation on the device: pointers into device arrays.
struct ResampleGeometry {
  long long planes = 0, win_plane = 1, out_plane = 1;
  long long outputs[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  int taps[3] = {1, 1, 1};
  const long long *i0[3] = {nullptr, nullptr, nullptr}, *i1[3] = {nullptr, nullptr, nullptr};
  const double *w0[3] = {nullptr, nullptr, nullptr}, *w1[3] = {nullptr, nullptr, nullptr};
};

/// output = the weighted sum over each output's taps.
cudaError_t launch_upsample_forward(ElemType t, const void* window, void* out,
                                    const ResampleGeometry& g, cudaStream_t stream);
/// grad_window (f64 device scratch of planes * win_plane, zeroed here) +=
/// each output's gradient times the weight, at every tap it read.
cudaError_t launch_upsample_backward(ElemType t, const void* grad_output, double* grad_window,
                                     const ResampleGeometry& g, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
