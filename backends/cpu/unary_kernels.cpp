// CPU kernels of the element-wise mathematical functions of one tensor and
// of their gradients (ops/unary_ops.cpp), vectorised in the data's own type
// (f32, f64; bf16 and f16 widened to f32 and rounded once), split over the
// rank's OpenMP threads for large tensors.
//
// The formulas, PyTorch's, are the ones every backend shares
// (dtensor/ops/kernels/elementwise_math.h); the CUDA kernels run the same.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/ops/kernels/elementwise.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

using Int = std::int64_t;
namespace ew = kernels::elementwise;

// Tensors smaller than this run on one thread.
constexpr Int kParallelElements = Int{1} << 16;

// Every function takes (g, x, s, t) (elementwise_math.h): the forward reads
// x = its input (passed as both), a backward g = grad_output too; s and t are
// the parameters (clamp's bounds, pow's exponent in s).
#define DTENSOR_UNARY_FORM(NAME, TYPE, FN)                                                    \
  DTENSOR_SIMD_CLONES void NAME(const TYPE* gp, const TYPE* xp, [[maybe_unused]] TYPE s,      \
                                [[maybe_unused]] TYPE t, std::add_pointer_t<TYPE> y, Int n) { \
    using T = TYPE;                                                                           \
    using Fn = FN;                                                                            \
    _Pragma("omp simd") for (Int j = 0; j < n; ++j) {                                         \
      [[maybe_unused]] const T g = gp[j];                                                     \
      [[maybe_unused]] const T x = xp[j];                                                     \
      y[j] = Fn{}(g, x, s, t);                                                                \
    }                                                                                         \
  }
#define DTENSOR_UNARY(NAME, FN)       \
  DTENSOR_UNARY_FORM(NAME, float, FN) \
  DTENSOR_UNARY_FORM(NAME, double, FN)

// The plain functions' rows (their list: elementwise_math.h), then clamp's
// and pow's.
#define DTENSOR_PLAIN_ROWS(NAME, FUNCTION, OP, POSITIVE, LINEAR) \
  DTENSOR_UNARY(OP##_rows, ew::NAME)                             \
  DTENSOR_UNARY(OP##_backward_rows, ew::NAME##Backward)
DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_ROWS)
#undef DTENSOR_PLAIN_ROWS
DTENSOR_UNARY(clamp_rows, ew::Clamp)
DTENSOR_UNARY(pow_rows, ew::Pow)
DTENSOR_UNARY(clamp_backward_rows, ew::ClampBackward)
DTENSOR_UNARY(pow_backward_rows, ew::PowBackward)
#undef DTENSOR_UNARY
#undef DTENSOR_UNARY_FORM

template <typename C>
using RowsFn = void (*)(const C*, const C*, C, C, C*, Int);

template <typename C>
void run_blocks(RowsFn<C> rows, const C* g, const C* x, C s, C t, C* y, Int n) {
  parallel_blocks(n, kParallelElements,
                  [&](Int lo, Int hi) { rows(g + lo, x + lo, s, t, y + lo, hi - lo); });
}

LocalKernel kernel(RowsFn<float> f32, RowsFn<double> f64) {
  return [f32, f64](const KernelCall& c) -> std::vector<Tensor> {
    const auto [backward, s, t] = kernels::elementwise_params(c.schema);
    const DType dt = c.local(0).dtype();
    const DType work = dt == DType::F64 ? DType::F64 : DType::F32;
    const auto in_work = [work](const Tensor& v) {
      return v.dtype() == work ? v.contiguous() : v.to(work);
    };
    const Tensor g = in_work(c.local(0));
    const Tensor x = backward ? in_work(c.local(1)) : g;
    Tensor y = Tensor::empty(x.shape(), work);
    if (work == DType::F64)
      run_blocks<double>(f64, g.data<double>(), x.data<double>(), s, t, y.data<double>(),
                         y.numel());
    else
      run_blocks<float>(f32, g.data<float>(), x.data<float>(), static_cast<float>(s),
                        static_cast<float>(t), y.data<float>(), y.numel());
    return {dt == work ? y : y.to(dt)};
  };
}

#define DTENSOR_REGISTER(OP)                                   \
  register_kernel(#OP, cpu, dt, kernel(OP##_rows, OP##_rows)); \
  register_kernel(#OP "_backward", cpu, dt, kernel(OP##_backward_rows, OP##_backward_rows));

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
#define DTENSOR_REGISTER_PLAIN(NAME, FUNCTION, OP, POSITIVE, LINEAR) DTENSOR_REGISTER(OP)
      DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_REGISTER_PLAIN)
#undef DTENSOR_REGISTER_PLAIN
      DTENSOR_REGISTER(clamp)
      DTENSOR_REGISTER(pow)
    }
  }
};
#undef DTENSOR_REGISTER
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
