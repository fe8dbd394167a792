// The few element-wise device kernels the core's Tensor needs on CUDA tensors
// (strided copy with dtype conversion, fill, add), launched from plain C++.
// The one .cu file of the library is elementwise.cu: nvcc time stays small.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dtensor/core/shape.h"

namespace dtensor::cuda_backend {

constexpr int kMaxKernelDims = 8;

/// Element types as the kernels see them (values match dtensor::DType).
enum class ElemType : int { F32 = 0, F64 = 1, BF16 = 2, F16 = 3 };

/// A shape and two stride vectors (in elements), after merging dimensions that
/// are contiguous in both tensors, so most copies run as one flat loop.
struct StridedLayout {
  int ndim = 0;
  std::int64_t sizes[kMaxKernelDims] = {};
  std::int64_t dst_strides[kMaxKernelDims] = {};
  std::int64_t src_strides[kMaxKernelDims] = {};
  std::int64_t numel = 0;
};

/// Builds the layout; InvalidArgument if it still has more than kMaxKernelDims
/// dimensions after merging. `src_strides` may equal `dst_strides` (fill).
StridedLayout make_layout(const Shape& shape, const Shape& dst_strides, const Shape& src_strides);

/// The strides (in elements) that read a contiguous tensor of shape `from`
/// as if it had shape `to` (NumPy broadcasting: trailing dims aligned; 0
/// where `from` has size 1 or lacks the dim). InvalidArgument when `from`
/// does not broadcast to `to`. With make_layout and launch_copy, it
/// materialises a broadcast operand.
Shape broadcast_strides(const Shape& from, const Shape& to);

cudaError_t launch_copy(void* dst, ElemType dst_type, const void* src, ElemType src_type,
                        const StridedLayout& layout, cudaStream_t stream);
cudaError_t launch_fill(void* dst, ElemType type, double value, const StridedLayout& layout,
                        cudaStream_t stream);
/// dst += src (same type).
cudaError_t launch_add(void* dst, const void* src, ElemType type, const StridedLayout& layout,
                       cudaStream_t stream);

}  // namespace dtensor::cuda_backend
