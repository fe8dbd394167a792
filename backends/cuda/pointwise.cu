// Device side of pointwise.h: one grid-stride kernel per (op, type) and a
// two-pass f64 sum. Kept separate from elementwise.cu so each .cu stays small
// for nvcc; both share the element types of element_types.cuh.
#include "backends/cuda/pointwise.h"
#include "backends/cuda/slot_kernels.cuh"
#include "dtensor/ops/kernels/elementwise_math.h"

namespace dtensor::cuda_backend {
namespace {

// Launch shapes and the compute type (f64 for f64, f32 for everything else,
// as the CPU kernels) are slot_kernels.cuh's.
constexpr int kThreads = kSlotThreads;

template <typename T, PointwiseOp Op>
__global__ void pointwise_kernel(T* out, const T* a, const T* b, double scalar, long long n) {
  using C = ComputeT<T>;
  const C s = static_cast<C>(scalar);
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x) {
    const C x = static_cast<C>(to_f64(a[i]));
    namespace ew = kernels::elementwise;
    C r;
    if constexpr (Op == PointwiseOp::ReluBackward) {  // a = grad, b = input
      r = static_cast<C>(to_f64(b[i])) > C(0) ? x : C(0);
    } else if constexpr (Op == PointwiseOp::Scale) {
      r = x * s;
    } else if constexpr (Op == PointwiseOp::Relu) {
      r = x > C(0) ? x : C(0);
    } else {
      const C z = static_cast<C>(to_f64(b[i]));
      if constexpr (Op == PointwiseOp::Add) r = ew::Add{}(x, z);
      if constexpr (Op == PointwiseOp::Sub) r = ew::Sub{}(x, z);
      if constexpr (Op == PointwiseOp::Mul) r = ew::Mul{}(x, z);
      if constexpr (Op == PointwiseOp::Div) r = ew::Div{}(x, z);
      if constexpr (Op == PointwiseOp::Maximum) r = ew::Maximum{}(x, z);
      if constexpr (Op == PointwiseOp::Minimum) r = ew::Minimum{}(x, z);
      if constexpr (Op == PointwiseOp::MaximumShare) r = ew::MaximumShare{}(x, z);
    }
    out[i] = from_f64<T>(r);
  }
}

template <typename T>
__global__ void partial_sums_kernel(const T* a, long long n, double* partials) {
  __shared__ double sh[kThreads];
  double acc = 0;
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    acc += to_f64(a[i]);
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

template <typename T>
__global__ void finish_sum_kernel(const double* partials, double divisor, T* out) {
  __shared__ double sh[kSumBlocks];
  sh[threadIdx.x] = partials[threadIdx.x];
  __syncthreads();
  for (int w = kSumBlocks / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = from_f64<T>(sh[0] / divisor);
}

template <typename T, PointwiseOp Op>
cudaError_t launch_op(void* out, const void* a, const void* b, double scalar, long long n,
                      cudaStream_t stream) {
  pointwise_kernel<T, Op><<<grid_for(n), kThreads, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), scalar, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_pointwise(PointwiseOp op, ElemType type, void* out, const void* a, const void* b,
                             double scalar, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
#define DTENSOR_CASE(OP) \
  case PointwiseOp::OP:  \
    return launch_op<T, PointwiseOp::OP>(out, a, b, scalar, n, stream);
      DTENSOR_CASE(Add)
      DTENSOR_CASE(Mul)
      DTENSOR_CASE(ReluBackward)
      DTENSOR_CASE(Scale)
      DTENSOR_CASE(Relu)
      DTENSOR_CASE(Sub)
      DTENSOR_CASE(Div)
      DTENSOR_CASE(Maximum)
      DTENSOR_CASE(Minimum)
      DTENSOR_CASE(MaximumShare)
#undef DTENSOR_CASE
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t launch_sum(ElemType type, const void* a, std::int64_t n, double divisor, void* out,
                       double* partials, cudaStream_t stream) {
  static_assert(kSumBlocks <= 1024 && (kSumBlocks & (kSumBlocks - 1)) == 0,
                "one block of kSumBlocks threads finishes the sum");
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    partial_sums_kernel<T>
        <<<kSumBlocks, kThreads, 0, stream>>>(static_cast<const T*>(a), n, partials);
    finish_sum_kernel<T><<<1, kSumBlocks, 0, stream>>>(partials, divisor, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
