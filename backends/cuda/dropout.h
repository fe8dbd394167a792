// Launcher of dropout's mask on CUDA tensors (the dropout.mask slot): the
// mask's one definition (dtensor/ops/kernels/dropout_hash.h) per element,
// from the element's global index. Registration and the host side are in
// dropout_kernels.cpp, the kernel in dropout.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/elementwise.h"
#include "dtensor/core/float16_bits.h"  // DTENSOR_HOST_DEVICE

namespace dtensor::cuda_backend {

/// Where a rank's part sits in the whole tensor, per dim (at most
/// kMaxKernelDims): its extent, its offset, the whole tensor's row-major stride.
struct DropoutPart {
  int ndim = 0;
  std::int64_t local[kMaxKernelDims] = {};
  std::int64_t offset[kMaxKernelDims] = {};
  std::int64_t global_stride[kMaxKernelDims] = {};
  std::int64_t numel = 0;
};

/// The part of a tensor of `global_shape` that starts at `offset` and has
/// shape `local`; InvalidArgument past kMaxKernelDims dims.
DropoutPart make_dropout_part(const Shape& local, const Shape& offset, const Shape& global_shape);

/// The global (row-major) index of the part's element e (its local
/// contiguous index).
DTENSOR_HOST_DEVICE inline long long dropout_global_index(const DropoutPart& part, long long e) {
  long long global = 0;
  for (int d = part.ndim - 1; d >= 0; --d) {
    global += (part.offset[d] + e % part.local[d]) * part.global_stride[d];
    e /= part.local[d];
  }
  return global;
}

/// y = uniform(key, global index) >= p ? x * scale : +0, in the compute type
/// (f32 for f32, bf16 and f16; f64 for f64), x and y contiguous.
cudaError_t launch_dropout(ElemType type, const void* x, void* y, const DropoutPart& part,
                           std::uint64_t key, double p, double scale, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
