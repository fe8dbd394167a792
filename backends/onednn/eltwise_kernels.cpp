// oneDNN's eltwise primitives as the CPU kernels of the activations for f32
// and bf16, forward and backward: gelu (erf and tanh forms), tanh (forward)
// and leaky_relu (sigmoid, silu and tanh's backward run faster in
// backends/cpu/logistic_kernels.cpp). Its JIT evaluates erf, exp and tanh
// in vector lanes on the rank's threads, where a loop calling std::erf runs
// one element at a time (gelu on 2x32x256x256: 27 ms against PyTorch's 4.7 ms,
// docs/benchmarks.md). bf16 is computed in f32 and rounded once, like the
// other kernels (by oneDNN, or widened here where oneDNN has no bf16:
// runs_bf16()). f64 and f16 stay on backends/eigen/activation_kernels.cpp.
#include <string>

#include "backends/onednn/onednn_common.h"
#include "dtensor/ops/registry.h"

namespace dtensor::onednn {
namespace {

// An activation as oneDNN spells it: the algorithm and its alpha.
struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0.0f;
};

// The key of a primitive: the pass, the algorithm, alpha, dtype and length, as bytes.
std::string_view key_of(const char* pass, const Eltwise& e, DType t, std::int64_t n) {
  return PlanKey(pass)
      .bytes(&e.alg, sizeof e.alg)
      .bytes(&e.alpha, sizeof e.alpha)
      .put(static_cast<std::int64_t>(t))
      .put(n)
      .view();
}

dnnl::memory::desc flat_md(DType t, std::int64_t n) {
  return dnnl::memory::desc({n}, data_type(t), dnnl::memory::format_tag::x);
}

dnnl::eltwise_forward::primitive_desc forward_pd(const Eltwise& e, DType t, std::int64_t n) {
  return {{dnnl::prop_kind::forward_training, e.alg, flat_md(t, n), e.alpha, 0.0f}, engine()};
}

PlanCache<dnnl::eltwise_forward>& forward_cache() {
  static PlanCache<dnnl::eltwise_forward> c;
  return c;
}
PlanCache<dnnl::eltwise_backward>& backward_cache() {
  static PlanCache<dnnl::eltwise_backward> c;
  return c;
}

dnnl::memory wrap(const Tensor& t) {
  return dnnl::memory(flat_md(t.dtype(), t.numel()), engine(), t.data_ptr());
}

// y = f(x).
Tensor forward(const Tensor& input, const Eltwise& e) {
  if (input.dtype() == DType::BF16 && !runs_bf16())
    return forward(input.to(DType::F32), e).to(DType::BF16);
  const Tensor x = input.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const std::int64_t n = x.numel();
  if (n == 0) return y;
  const auto prim = forward_cache().get(key_of("eltwise_fwd", e, x.dtype(), n), [&] {
    return dnnl::eltwise_forward(forward_pd(e, x.dtype(), n));
  });
  auto& s = stream();
  ExecArgs().add(DNNL_ARG_SRC, wrap(x)).add(DNNL_ARG_DST, wrap(y)).run(*prim);
  s.wait();
  return y;
}

// grad_input = grad_output * f'(x).
Tensor backward(const Tensor& grad_output, const Tensor& input, const Eltwise& e) {
  if (input.dtype() == DType::BF16 && !runs_bf16())
    return backward(grad_output.to(DType::F32), input.to(DType::F32), e).to(DType::BF16);
  const Tensor g = grad_output.contiguous(), x = input.contiguous();
  Tensor gx = Tensor::empty(x.shape(), x.dtype());
  const std::int64_t n = x.numel();
  if (n == 0) return gx;
  const auto prim = backward_cache().get(key_of("eltwise_bwd", e, x.dtype(), n), [&] {
    const auto md = flat_md(x.dtype(), n);
    return dnnl::eltwise_backward(
        {{e.alg, md, md, e.alpha, 0.0f}, engine(), forward_pd(e, x.dtype(), n)});
  });
  auto& s = stream();
  ExecArgs()
      .add(DNNL_ARG_SRC, wrap(x))
      .add(DNNL_ARG_DIFF_DST, wrap(g))
      .add(DNNL_ARG_DIFF_SRC, wrap(gx))
      .run(*prim);
  s.wait();
  return gx;
}

// The operator's activation: `param` is the position of its parameter in
// the call (leaky_relu's slope, gelu's approximate), -1 for none.
Eltwise eltwise_of(const OpSchema& s, const std::string& op, std::size_t param) {
  if (op == "leaky_relu")
    return {dnnl::algorithm::eltwise_relu, static_cast<float>(s.scalar(param))};
  if (op == "gelu")
    return {s.text(param) == "tanh" ? dnnl::algorithm::eltwise_gelu_tanh
                                    : dnnl::algorithm::eltwise_gelu_erf};
  return {dnnl::algorithm::eltwise_tanh};
}

struct Registrar {
  Registrar() {
    // The position of each activation's parameter after its tensors.
    const struct {
      const char* op;
      std::size_t param;
    } ops[] = {{"leaky_relu", 1}, {"gelu", 1}, {"tanh", 0}};
    for (DType dt : {DType::F32, DType::BF16})
      for (const auto& a : ops) {
        const std::string op = a.op;
        const std::size_t param = a.param;
        register_kernel(op, DeviceType::CPU, dt, [op, param](const KernelCall& c) {
          return std::vector<Tensor>{forward(c.local(0), eltwise_of(c.schema, op, param))};
        });
        if (op == "tanh") continue;  // its backward: backends/cpu/logistic_kernels.cpp
        register_kernel(op + "_backward", DeviceType::CPU, dt, [op, param](const KernelCall& c) {
          return std::vector<Tensor>{
              backward(c.local(0), c.local(1), eltwise_of(c.schema, op, param + 1))};
        });
      }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::onednn
