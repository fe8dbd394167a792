// The element-wise functions of one tensor and the activations, and their
// gradients, and the binary operators, one element at a time and written once for every backend:
// the CPU kernels run them in vectorised loops (backends/cpu/unary_kernels.cpp,
// backends/eigen/activation_kernels.cpp), the CUDA kernels one thread per
// element (backends/cuda/unary.cu), so both compute PyTorch's formulas in the
// same operations. bf16 and f16 are computed in f32 and rounded once; f64 in
// f64.
//
// Every function object takes (g, x, s, t): x is the input, g the gradient of
// the output (a forward ignores it), s and t the operator's parameters:
// clamp's bounds, pow's exponent (s), leaky_relu's slope (s), gelu's form (t
// non-zero: the tanh approximation). Derivatives as PyTorch computes them:
// sqrt's from the result (g / (2 sqrt x)), rsqrt's -g y^3 / 2, abs's through
// sgn (0 at 0), clamp's passing where min <= x <= max, pow's exponent *
// x^(exponent - 1) (0 for exponent 0), gelu's with PyTorch's GeluKernel
// constants. Plain C++17, so nvcc compiles it as it is.
#pragma once

#include <cmath>

#include "dtensor/ops/kernels/optim_update.h"  // DTENSOR_ELEMENT_FN

namespace dtensor::kernels::elementwise {

#define DTENSOR_ELEMENT_OP(NAME, EXPR)                                                  \
  struct NAME {                                                                         \
    template <typename T>                                                               \
    DTENSOR_ELEMENT_FN T operator()([[maybe_unused]] T g, [[maybe_unused]] T x,         \
                                    [[maybe_unused]] T s, [[maybe_unused]] T t) const { \
      return (EXPR);                                                                    \
    }                                                                                   \
  };

// The constants in the computing type (as PyTorch's kernels convert them).
#define DTENSOR_C(v) static_cast<T>(v)

template <typename T>
DTENSOR_ELEMENT_FN T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
DTENSOR_ELEMENT_FN T gelu_of(T x, bool tanh_form) {
  if (tanh_form) {
    const T beta = DTENSOR_C(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = DTENSOR_C(0.044715);
    const T inner = beta * (x + kappa * x * x * x);
    return DTENSOR_C(0.5) * x * (T(1) + std::tanh(inner));
  }
  return x * DTENSOR_C(0.5) * (T(1) + std::erf(x * DTENSOR_C(M_SQRT1_2)));
}

template <typename T>
DTENSOR_ELEMENT_FN T gelu_grad_of(T g, T x, bool tanh_form) {
  if (tanh_form) {
    const T beta = DTENSOR_C(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = DTENSOR_C(0.044715);
    const T x_sq = x * x, x_cube = x_sq * x;
    const T inner = beta * (x + kappa * x_cube);
    const T th = std::tanh(inner);
    const T left = DTENSOR_C(0.5) * x, right = T(1) + th;
    const T left_derivative = DTENSOR_C(0.5) * right;
    const T right_derivative = T(1) - th * th;
    const T inner_derivative = beta * (T(1) + T(3) * kappa * x_sq);
    return g * (left_derivative + left * right_derivative * inner_derivative);
  }
  const T alpha = DTENSOR_C(M_SQRT1_2), beta = DTENSOR_C(M_2_SQRTPI * M_SQRT1_2 * 0.5);
  const T cdf = DTENSOR_C(0.5) * (T(1) + std::erf(x * alpha));
  const T pdf = beta * std::exp(x * x * DTENSOR_C(-0.5));
  return g * (cdf + x * pdf);
}

template <typename T>
DTENSOR_ELEMENT_FN T silu_grad_of(T g, T x) {
  const T sg = sigmoid_of(x);
  return g * sg * (T(1) + x * (T(1) - sg));
}
template <typename T>
DTENSOR_ELEMENT_FN T sigmoid_grad_of(T g, T x) {
  const T sg = sigmoid_of(x);
  return g * sg * (T(1) - sg);
}
template <typename T>
DTENSOR_ELEMENT_FN T tanh_grad_of(T g, T x) {
  const T th = std::tanh(x);
  return g * (T(1) - th * th);
}

// ---- mathematical functions (ops/unary_ops.cpp) ----

// The plain ones (one input, no parameter), a row each. Everything else about
// them follows from the row: the public functions dtensor::FUNCTION and
// dtensor::OP_backward (dtensor/ops/unary.h); the operator OP and OP_backward,
// their strategies and autograd rule (ops/unary_ops.cpp); the CPU and CUDA
// kernels, which run NAME and NAME##Backward below; dtensor-op's OP and the
// replay of its dumps as torch.OP (tools/check_op_dump.py reads this list).
// Adding one is its row, its two formulas below and its f64 oracle
// (tools/reference/reference_tensor_ops.cpp).
//   X(NAME, FUNCTION, OP, POSITIVE, LINEAR)
// POSITIVE: defined for positive inputs only (the tools draw its input in
// [0.5, 1.5)); LINEAR: linear in its input, so a Partial input stays Partial.
// natural_log is torch.log (`log` names the logging namespace here); abs's
// gradient at 0 is 0 (torch's sgn).
#define DTENSOR_PLAIN_UNARY_FUNCTIONS(X) \
  X(Exp, exp, exp, false, false)         \
  X(Log, natural_log, log, true, false)  \
  X(Sqrt, sqrt, sqrt, true, false)       \
  X(Rsqrt, rsqrt, rsqrt, true, false)    \
  X(Neg, neg, neg, false, true)          \
  X(Abs, abs, abs, false, false)         \
  X(Square, square, square, false, false)

DTENSOR_ELEMENT_OP(Exp, std::exp(x))
DTENSOR_ELEMENT_OP(Log, std::log(x))
DTENSOR_ELEMENT_OP(Sqrt, std::sqrt(x))
DTENSOR_ELEMENT_OP(Rsqrt, DTENSOR_C(1) / std::sqrt(x))
DTENSOR_ELEMENT_OP(Neg, -x)
DTENSOR_ELEMENT_OP(Abs, std::abs(x))
DTENSOR_ELEMENT_OP(Square, x* x)
DTENSOR_ELEMENT_OP(Clamp, x < s ? s : (x > t ? t : x))
DTENSOR_ELEMENT_OP(Pow, std::pow(x, s))

DTENSOR_ELEMENT_OP(ExpBackward, g* std::exp(x))
DTENSOR_ELEMENT_OP(LogBackward, g / x)
DTENSOR_ELEMENT_OP(SqrtBackward, g / (DTENSOR_C(2) * std::sqrt(x)))
DTENSOR_ELEMENT_OP(RsqrtBackward, DTENSOR_C(-0.5) * g * (DTENSOR_C(1) / std::sqrt(x)) *
                                      (DTENSOR_C(1) / std::sqrt(x)) * (DTENSOR_C(1) / std::sqrt(x)))
DTENSOR_ELEMENT_OP(NegBackward, -g)
DTENSOR_ELEMENT_OP(AbsBackward, x > 0 ? g : (x < 0 ? -g : DTENSOR_C(0)))
DTENSOR_ELEMENT_OP(SquareBackward, DTENSOR_C(2) * x * g)
DTENSOR_ELEMENT_OP(ClampBackward, (x >= s && x <= t) ? g : DTENSOR_C(0))
DTENSOR_ELEMENT_OP(PowBackward, s == 0 ? DTENSOR_C(0) : s * std::pow(x, s - DTENSOR_C(1)) * g)

// ---- activations (ops/activation_ops.cpp) ----
DTENSOR_ELEMENT_OP(LeakyRelu, x > 0 ? x : x * s)
DTENSOR_ELEMENT_OP(Gelu, gelu_of(x, t != 0))
DTENSOR_ELEMENT_OP(Silu, x* sigmoid_of(x))
DTENSOR_ELEMENT_OP(Sigmoid, sigmoid_of(x))
DTENSOR_ELEMENT_OP(Tanh, std::tanh(x))

DTENSOR_ELEMENT_OP(LeakyReluBackward, x > 0 ? g : g * s)
DTENSOR_ELEMENT_OP(GeluBackward, gelu_grad_of(g, x, t != 0))
DTENSOR_ELEMENT_OP(SiluBackward, silu_grad_of(g, x))
DTENSOR_ELEMENT_OP(SigmoidBackward, sigmoid_grad_of(g, x))
DTENSOR_ELEMENT_OP(TanhBackward, tanh_grad_of(g, x))

// ---- binary operators (ops/binary_ops.cpp): x the first operand's element,
// z the second's; maximum and minimum propagate NaN from either side
// (torch.maximum); maximum_share is the share of maximum's gradient the first
// operand gets (1, 0.5 at a tie, 0). ----
#define DTENSOR_BINARY_OP(NAME, EXPR)                 \
  struct NAME {                                       \
    template <typename T>                             \
    DTENSOR_ELEMENT_FN T operator()(T x, T z) const { \
      return (EXPR);                                  \
    }                                                 \
  };
DTENSOR_BINARY_OP(Add, x + z)
DTENSOR_BINARY_OP(Sub, x - z)
DTENSOR_BINARY_OP(Mul, x* z)
DTENSOR_BINARY_OP(Div, x / z)
DTENSOR_BINARY_OP(Maximum, (x > z || x != x) ? x : z)
DTENSOR_BINARY_OP(Minimum, (x < z || x != x) ? x : z)
DTENSOR_BINARY_OP(MaximumShare, x > z ? T(1) : (x == z ? DTENSOR_C(0.5) : T(0)))

#undef DTENSOR_BINARY_OP
#undef DTENSOR_C
#undef DTENSOR_ELEMENT_OP

}  // namespace dtensor::kernels::elementwise
