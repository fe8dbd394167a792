// Device side of unary.h: one grid-stride kernel per (function, direction,
// type), each running the shared formula of elementwise_math.h in the
// compute type.
#include "backends/cuda/slot_kernels.cuh"
#include "backends/cuda/unary.h"
#include "dtensor/ops/kernels/elementwise_math.h"

namespace dtensor::cuda_backend {
namespace {

namespace ew = kernels::elementwise;

template <typename T, typename F>
__global__ void unary_kernel(T* y, const T* g, const T* x, ComputeT<T> s, ComputeT<T> t,
                             long long n) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n;
       i += 1ll * gridDim.x * blockDim.x)
    y[i] = from_f64<T>(F{}(load_c(g, i), load_c(x, i), s, t));
}

template <typename Forward, typename Backward>
struct Pair {
  using forward = Forward;
  using backward = Backward;
};

// The function objects of `fn`, handed to `f` as a Pair.
template <typename Fn>
cudaError_t with_fn(UnaryFn fn, Fn&& f) {
  switch (fn) {
#define DTENSOR_PLAIN_CASE(NAME, FUNCTION, OP, POSITIVE, LINEAR) \
  case UnaryFn::NAME:                                            \
    return f(Pair<ew::NAME, ew::NAME##Backward>{});
    DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_CASE)
#undef DTENSOR_PLAIN_CASE
    case UnaryFn::Clamp:
      return f(Pair<ew::Clamp, ew::ClampBackward>{});
    case UnaryFn::Pow:
      return f(Pair<ew::Pow, ew::PowBackward>{});
    case UnaryFn::LeakyRelu:
      return f(Pair<ew::LeakyRelu, ew::LeakyReluBackward>{});
    case UnaryFn::Gelu:
      return f(Pair<ew::Gelu, ew::GeluBackward>{});
    case UnaryFn::Silu:
      return f(Pair<ew::Silu, ew::SiluBackward>{});
    case UnaryFn::Sigmoid:
      return f(Pair<ew::Sigmoid, ew::SigmoidBackward>{});
    case UnaryFn::Tanh:
      return f(Pair<ew::Tanh, ew::TanhBackward>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_unary(UnaryFn fn, bool backward, ElemType type, void* y, const void* g,
                         const void* x, double s, double t, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    return with_fn(fn, [&](auto pair) {
      using P = decltype(pair);
      auto* out = static_cast<T*>(y);
      const auto* gp = static_cast<const T*>(g);
      const auto* xp = static_cast<const T*>(x);
      if (backward)
        unary_kernel<T, typename P::backward><<<grid_for(n), kSlotThreads, 0, stream>>>(
            out, gp, xp, static_cast<C>(s), static_cast<C>(t), n);
      else
        unary_kernel<T, typename P::forward><<<grid_for(n), kSlotThreads, 0, stream>>>(
            out, gp, xp, static_cast<C>(s), static_cast<C>(t), n);
      return cudaGetLastError();
    });
  });
}

}  // namespace dtensor::cuda_backend
