// CPU kernels of the activation functions and their backwards
// (ops/activation_ops.cpp), with PyTorch's formulas, for f64 and f16 (f16
// computed in f32 and rounded once at the end); f32 and bf16 run on oneDNN's
// vectorised eltwise primitives (backends/onednn/eltwise_kernels.cpp).
#include <cmath>
#include <string>
#include <type_traits>

#include "dtensor/ops/registry.h"

namespace dtensor {
namespace {

// Runs fn(inputs, out, n) on f32/f64 buffers; bf16/f16 inputs are widened to
// f32 and the result narrowed.
template <typename Fn>
Tensor compute(const std::vector<Tensor>& ins, Fn&& fn) {
  const DType dt = ins.at(0).dtype();
  const DType work = (dt == DType::BF16 || dt == DType::F16) ? DType::F32 : dt;
  std::vector<Tensor> w;
  for (auto& t : ins)
    w.push_back(t.dtype() == work ? t.contiguous() : t.to(work));
  Tensor out = Tensor::empty(ins.at(0).shape(), work);
  const std::int64_t n = out.numel();
  if (work == DType::F64) {
    const double* a = w[0].data<double>();
    const double* b = w.size() > 1 ? w[1].data<double>() : nullptr;
    fn(a, b, out.data<double>(), n);
  } else {
    const float* a = w[0].data<float>();
    const float* b = w.size() > 1 ? w[1].data<float>() : nullptr;
    fn(a, b, out.data<float>(), n);
  }
  return dt == work ? out : out.to(dt);
}

// f(x, param) element-wise over argument 0.
template <typename F>
LocalKernel unary(F f) {
  return [f](const KernelCall& c) -> std::vector<Tensor> {
    const double slope = c.schema.op() == "leaky_relu" ? c.schema.scalar(1) : 0.0;
    const bool tanh_form = c.schema.op() == "gelu" && c.schema.text(1) == "tanh";
    return {compute({c.local(0)}, [&](const auto* x, const auto*, auto* y, std::int64_t n) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(y)>>;
      for (std::int64_t i = 0; i < n; ++i)
        y[i] = f(x[i], static_cast<T>(slope), tanh_form);
    })};
  };
}

// f(grad, x, param) element-wise over arguments 0 (grad_output) and 1 (input).
template <typename F>
LocalKernel binary(F f) {
  return [f](const KernelCall& c) -> std::vector<Tensor> {
    const double slope = c.schema.op() == "leaky_relu_backward" ? c.schema.scalar(2) : 0.0;
    const bool tanh_form = c.schema.op() == "gelu_backward" && c.schema.text(2) == "tanh";
    return {compute({c.local(0), c.local(1)},
                    [&](const auto* g, const auto* x, auto* y, std::int64_t n) {
                      using T = std::remove_cv_t<std::remove_pointer_t<decltype(y)>>;
                      for (std::int64_t i = 0; i < n; ++i)
                        y[i] = f(g[i], x[i], static_cast<T>(slope), tanh_form);
                    })};
  };
}

template <typename T>
T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// PyTorch's GeluKernel.cpp constants.
template <typename T>
T gelu_of(T x, bool tanh_form) {
  if (tanh_form) {
    const T beta = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = static_cast<T>(0.044715);
    const T inner = beta * (x + kappa * x * x * x);
    return static_cast<T>(0.5) * x * (T(1) + std::tanh(inner));
  }
  return x * static_cast<T>(0.5) * (T(1) + std::erf(x * static_cast<T>(M_SQRT1_2)));
}

template <typename T>
T gelu_grad_of(T g, T x, bool tanh_form) {
  if (tanh_form) {
    const T beta = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = static_cast<T>(0.044715);
    const T x_sq = x * x, x_cube = x_sq * x;
    const T inner = beta * (x + kappa * x_cube);
    const T t = std::tanh(inner);
    const T left = static_cast<T>(0.5) * x, right = T(1) + t;
    const T left_derivative = static_cast<T>(0.5) * right;
    const T right_derivative = T(1) - t * t;
    const T inner_derivative = beta * (T(1) + T(3) * kappa * x_sq);
    return g * (left_derivative + left * right_derivative * inner_derivative);
  }
  const T alpha = static_cast<T>(M_SQRT1_2), beta = static_cast<T>(M_2_SQRTPI * M_SQRT1_2 * 0.5);
  const T cdf = static_cast<T>(0.5) * (T(1) + std::erf(x * alpha));
  const T pdf = beta * std::exp(x * x * static_cast<T>(-0.5));
  return g * (cdf + x * pdf);
}

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F64, DType::F16}) {
      register_kernel("leaky_relu", cpu, dt,
                      unary([](auto x, auto s, bool) { return x > 0 ? x : x * s; }));
      register_kernel("leaky_relu_backward", cpu, dt,
                      binary([](auto g, auto x, auto s, bool) { return x > 0 ? g : g * s; }));
      register_kernel("gelu", cpu, dt, unary([](auto x, auto, bool t) { return gelu_of(x, t); }));
      register_kernel("gelu_backward", cpu, dt,
                      binary([](auto g, auto x, auto, bool t) { return gelu_grad_of(g, x, t); }));
      register_kernel("silu", cpu, dt, unary([](auto x, auto, bool) { return x * sigmoid_of(x); }));
      register_kernel("silu_backward", cpu, dt, binary([](auto g, auto x, auto, bool) {
                        using T = decltype(x);
                        const T s = sigmoid_of(x);
                        return g * s * (T(1) + x * (T(1) - s));
                      }));
      register_kernel("sigmoid", cpu, dt, unary([](auto x, auto, bool) { return sigmoid_of(x); }));
      register_kernel("sigmoid_backward", cpu, dt, binary([](auto g, auto x, auto, bool) {
                        using T = decltype(x);
                        const T s = sigmoid_of(x);
                        return g * s * (T(1) - s);
                      }));
      register_kernel("tanh", cpu, dt, unary([](auto x, auto, bool) { return std::tanh(x); }));
      register_kernel("tanh_backward", cpu, dt, binary([](auto g, auto x, auto, bool) {
                        using T = decltype(x);
                        const T t = std::tanh(x);
                        return g * (T(1) - t * t);
                      }));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor
