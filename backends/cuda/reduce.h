// Launchers of the reductions over dims on CUDA tensors (sum_dims, mean_dims,
// amax, amin, sum_to_size, the backward helpers reduce_expand and
// reduce_tie_mask, and var's reduce.moments slot): the CPU kernels' contract
// (backends/cpu/reduce_kernels.cpp), f64 arithmetic, one rounding to the
// data's type. Registration is in reduce_kernels.cpp, the kernels in
// reduce.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/elementwise.h"
#include "dtensor/core/float16_bits.h"  // DTENSOR_HOST_DEVICE

namespace dtensor::cuda_backend {

/// A contiguous x and the dims reduced, as the kernels walk them: one thread
/// per result folds that result's elements in x's order (deterministic), or
/// one thread per element of x finds its result.
struct ReduceLayout {
  int ndim = 0;                                 // x's dims, at least 1
  std::int64_t sizes[kMaxKernelDims] = {};      // x's shape
  std::int64_t x_strides[kMaxKernelDims] = {};  // x's contiguous strides
  // The keepdim result's contiguous strides, 0 along the reduced dims.
  std::int64_t out_strides[kMaxKernelDims] = {};
  bool reduced[kMaxKernelDims] = {};
  std::int64_t results = 1, per_result = 1, numel = 0;
};

/// The layout of a contiguous x (a 0-d x as one element) with the dims of
/// `reduced` (one per dim of x) reduced; InvalidArgument naming `op` past
/// kMaxKernelDims dims.
ReduceLayout make_reduce_layout(const Shape& x_shape, const std::vector<bool>& reduced,
                                const char* op);

/// The offset in x of index i over the dims with reduced == `reduced`, in
/// x's order: with false, the first element of result i; with true, a
/// result's i-th element from its first.
DTENSOR_HOST_DEVICE inline long long reduce_offset_over(const ReduceLayout& L, long long i,
                                                        bool reduced) {
  long long off = 0;
  for (int d = L.ndim - 1; d >= 0; --d) {
    if (L.reduced[d] != reduced) continue;
    off += (i % L.sizes[d]) * L.x_strides[d];
    i /= L.sizes[d];
  }
  return off;
}

/// The result of x's element e (its keepdim result's offset).
DTENSOR_HOST_DEVICE inline long long reduce_result_of(const ReduceLayout& L, long long e) {
  long long off = 0;
  for (int d = L.ndim - 1; d >= 0; --d) {
    off += (e % L.sizes[d]) * L.out_strides[d];
    e /= L.sizes[d];
  }
  return off;
}

enum class ReduceFold : int { Sum, Max, Min };

/// out[r] = the fold of result r's elements (f64; Max/Min: NaN wins) times
/// `scale`, in out's type (x's).
cudaError_t launch_reduce_fold(ReduceFold fold, ElemType type, const void* x, void* out,
                               const ReduceLayout& layout, double scale, cudaStream_t stream);
/// out[e] = g[result of e] * scale over x's elements (reduce_expand).
cudaError_t launch_reduce_expand(ElemType type, const void* g, void* out,
                                 const ReduceLayout& layout, double scale, cudaStream_t stream);
/// out[e] = x[e] == result[result of e] ? 1 : 0 (reduce_tie_mask).
cudaError_t launch_reduce_tie_mask(ElemType type, const void* x, const void* result, void* out,
                                   const ReduceLayout& layout, cudaStream_t stream);
/// moments[3 r .. 3 r + 2] = (count, mean, M2) of result r's elements
/// (Welford's update, f64), on the device.
cudaError_t launch_reduce_moments(ElemType type, const void* x, double* moments,
                                  const ReduceLayout& layout, cudaStream_t stream);

}  // namespace dtensor::cuda_backend
