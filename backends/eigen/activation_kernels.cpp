// CPU kernels of the activation functions and their backwards
// (ops/activation_ops.cpp), with PyTorch's formulas as every backend shares
// them (dtensor/ops/kernels/elementwise_math.h; the CUDA kernels run the
// same), for f64 and f16 (f16 computed in f32 and rounded once at the end);
// f32 and bf16 run on oneDNN's vectorised eltwise primitives
// (backends/onednn/eltwise_kernels.cpp), sigmoid and silu on the library's
// own (backends/cpu/logistic_kernels.cpp).
#include <cmath>
#include <string>
#include <type_traits>

#include "dtensor/ops/kernels/elementwise.h"
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

// F(g, x, s, t) element-wise (elementwise_math.h): a forward over argument 0,
// a backward over arguments 0 (grad_output) and 1 (input).
template <typename F>
LocalKernel activation() {
  return [](const KernelCall& c) -> std::vector<Tensor> {
    // Named copies: clang (the linter) does not capture structured bindings.
    const kernels::ElementwiseParams p = kernels::elementwise_params(c.schema);
    const bool backward = p.backward;
    const double s = p.s, t = p.t;
    std::vector<Tensor> ins{c.local(0)};
    if (backward) ins.push_back(c.local(1));
    return {compute(ins, [&](const auto* a, const auto* b, auto* y, std::int64_t n) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(y)>>;
      const T* g = a;
      const T* x = backward ? b : a;
      for (std::int64_t i = 0; i < n; ++i)
        y[i] = F{}(g[i], x[i], static_cast<T>(s), static_cast<T>(t));
    })};
  };
}

struct Registrar {
  Registrar() {
    namespace ew = kernels::elementwise;
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F64, DType::F16}) {
      register_kernel("leaky_relu", cpu, dt, activation<ew::LeakyRelu>());
      register_kernel("leaky_relu_backward", cpu, dt, activation<ew::LeakyReluBackward>());
      register_kernel("gelu", cpu, dt, activation<ew::Gelu>());
      register_kernel("gelu_backward", cpu, dt, activation<ew::GeluBackward>());
      register_kernel("silu", cpu, dt, activation<ew::Silu>());
      register_kernel("silu_backward", cpu, dt, activation<ew::SiluBackward>());
      register_kernel("sigmoid", cpu, dt, activation<ew::Sigmoid>());
      register_kernel("sigmoid_backward", cpu, dt, activation<ew::SigmoidBackward>());
      register_kernel("tanh", cpu, dt, activation<ew::Tanh>());
      register_kernel("tanh_backward", cpu, dt, activation<ew::TanhBackward>());
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor
