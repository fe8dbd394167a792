// Launchers of the optimisers' updates and of gradient clipping's norm parts
// on CUDA tensors (dtensor/ops/kernels/optim.h). The updates are the element
// functions every backend shares (dtensor/ops/kernels/optim_update.h), one
// thread per element; registration is in optim_kernels.cpp, the kernels in
// optim.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/elementwise.h"
#include "dtensor/ops/kernels/optim_update.h"

namespace dtensor::cuda_backend {

/// The updates in place, for T = float and double; a null state pointer is
/// state the settings do not have (as the element functions take it).
template <typename T>
cudaError_t launch_sgd(T* p, const T* g, T* buf, std::int64_t n, const kernels::SgdScalars<T>& s,
                       cudaStream_t stream);
template <typename T>
cudaError_t launch_adam(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n,
                        const kernels::AdamScalars<T>& s, cudaStream_t stream);
template <typename T>
cudaError_t launch_rmsprop(T* p, const T* g, T* sq, T* ga, T* buf, std::int64_t n,
                           const kernels::RmspropScalars<T>& s, cudaStream_t stream);

/// Blocks of launch_norm_partials, and so the doubles `partials` holds.
constexpr int kNormPartBlocks = 256;

/// Per block, in f64: the sum of |x|^p over its elements (p = 2: squares), or
/// for p = infinity the largest |x| (NaN wins), into kNormPartBlocks doubles of
/// device memory. The host combines them in block order, so the result does
/// not change from run to run.
cudaError_t launch_norm_partials(ElemType type, const void* x, std::int64_t n, double norm_type,
                                 double* partials, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
