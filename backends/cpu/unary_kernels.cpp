// CPU kernels of the element-wise mathematical functions of one tensor and
// of their gradients (ops/unary_ops.cpp), vectorised in the data's own type
// (f32, f64; bf16 and f16 widened to f32 and rounded once), split over the
// rank's OpenMP threads for large tensors.
//
// Derivatives as PyTorch computes them: sqrt's from the result (g / (2 y)),
// rsqrt's -g y^3 / 2, abs's through sgn (0 at 0), clamp's passing where
// min <= x <= max, pow's exponent * x^(exponent - 1), 0 for exponent 0.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/simd.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

using Int = std::int64_t;

// Tensors smaller than this run on one thread.
constexpr Int kParallelElements = Int{1} << 16;

// Every form takes (g, x, s, t): the forward reads x = its input (passed as
// both), a backward g = grad_output too; s and t are the parameters (clamp's
// bounds, pow's exponent in s).
#define DTENSOR_UNARY_FORM(NAME, TYPE, EXPR)                                                  \
  DTENSOR_SIMD_CLONES void NAME(const TYPE* gp, const TYPE* xp, [[maybe_unused]] TYPE s,      \
                                [[maybe_unused]] TYPE t, std::add_pointer_t<TYPE> y, Int n) { \
    using T = TYPE;                                                                           \
    _Pragma("omp simd") for (Int j = 0; j < n; ++j) {                                         \
      [[maybe_unused]] const T g = gp[j];                                                     \
      [[maybe_unused]] const T x = xp[j];                                                     \
      y[j] = (EXPR);                                                                          \
    }                                                                                         \
  }
#define DTENSOR_UNARY(NAME, EXPR)       \
  DTENSOR_UNARY_FORM(NAME, float, EXPR) \
  DTENSOR_UNARY_FORM(NAME, double, EXPR)

#define T_(v) static_cast<T>(v)
DTENSOR_UNARY(exp_rows, std::exp(x))
DTENSOR_UNARY(log_rows, std::log(x))
DTENSOR_UNARY(sqrt_rows, std::sqrt(x))
DTENSOR_UNARY(rsqrt_rows, T_(1) / std::sqrt(x))
DTENSOR_UNARY(neg_rows, -x)
DTENSOR_UNARY(abs_rows, std::abs(x))
DTENSOR_UNARY(square_rows, x* x)
DTENSOR_UNARY(clamp_rows, x < s ? s : (x > t ? t : x))
DTENSOR_UNARY(pow_rows, std::pow(x, s))

DTENSOR_UNARY(exp_backward_rows, g* std::exp(x))
DTENSOR_UNARY(log_backward_rows, g / x)
DTENSOR_UNARY(sqrt_backward_rows, g / (T_(2) * std::sqrt(x)))
DTENSOR_UNARY(rsqrt_backward_rows, T_(-0.5) * g * (T_(1) / std::sqrt(x)) * (T_(1) / std::sqrt(x)) *
                                       (T_(1) / std::sqrt(x)))
DTENSOR_UNARY(neg_backward_rows, -g)
DTENSOR_UNARY(abs_backward_rows, x > 0 ? g : (x < 0 ? -g : T_(0)))
DTENSOR_UNARY(square_backward_rows, T_(2) * x * g)
DTENSOR_UNARY(clamp_backward_rows, (x >= s && x <= t) ? g : T_(0))
DTENSOR_UNARY(pow_backward_rows, s == 0 ? T_(0) : s * std::pow(x, s - T_(1)) * g)
#undef T_
#undef DTENSOR_UNARY
#undef DTENSOR_UNARY_FORM

template <typename C>
using RowsFn = void (*)(const C*, const C*, C, C, C*, Int);

template <typename C>
void run_blocks(RowsFn<C> rows, const C* g, const C* x, C s, C t, C* y, Int n) {
  const int threads = n >= kParallelElements ? omp_get_max_threads() : 1;
  if (threads <= 1) {
    rows(g, x, s, t, y, n);
    return;
  }
  const Int block = (n + threads - 1) / threads;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int k = 0; k < threads; ++k) {
    const Int lo = k * block, hi = std::min(n, lo + block);
    if (lo < hi) rows(g + lo, x + lo, s, t, y + lo, hi - lo);
  }
}

// The parameters after the tensors: an absent bound is -inf for the first
// (clamp's min) and +inf for the second (max).
void parameters(const OpSchema& schema, std::size_t first, double& s, double& t) {
  double* out[] = {&s, &t};
  const double absent[] = {-std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::infinity()};
  for (std::size_t k = 0; k < 2 && first + k < schema.size(); ++k)
    *out[k] = schema.is_none(first + k) ? absent[k] : schema.scalar(first + k);
}

LocalKernel kernel(RowsFn<float> f32, RowsFn<double> f64, bool backward) {
  return [f32, f64, backward](const KernelCall& c) -> std::vector<Tensor> {
    const DType dt = c.local(0).dtype();
    const DType work = dt == DType::F64 ? DType::F64 : DType::F32;
    const auto in_work = [work](const Tensor& v) {
      return v.dtype() == work ? v.contiguous() : v.to(work);
    };
    const Tensor g = in_work(c.local(0));
    const Tensor x = backward ? in_work(c.local(1)) : g;
    double s = 0, t = 0;
    parameters(c.schema, backward ? 2 : 1, s, t);
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

#define DTENSOR_REGISTER(OP)                                          \
  register_kernel(#OP, cpu, dt, kernel(OP##_rows, OP##_rows, false)); \
  register_kernel(#OP "_backward", cpu, dt, kernel(OP##_backward_rows, OP##_backward_rows, true));

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      DTENSOR_REGISTER(exp)
      DTENSOR_REGISTER(log)
      DTENSOR_REGISTER(sqrt)
      DTENSOR_REGISTER(rsqrt)
      DTENSOR_REGISTER(neg)
      DTENSOR_REGISTER(abs)
      DTENSOR_REGISTER(square)
      DTENSOR_REGISTER(clamp)
      DTENSOR_REGISTER(pow)
    }
  }
};
#undef DTENSOR_REGISTER
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
