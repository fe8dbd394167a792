// CPU kernels of the element-wise operators and reductions, with Eigen.
// bf16 and f16 are computed in f32 and rounded once at the end.
#include <Eigen/Core>

#include "dtensor/ops/registry.h"

namespace dtensor {
namespace {

template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Runs fn on f32/f64 arrays; bf16/f16 inputs are widened to f32 and the result narrowed.
template <typename Fn>
Tensor compute(const std::vector<Tensor>& ins, const Shape& out_shape, Fn&& fn) {
  const DType dt = ins.at(0).dtype();
  const DType work = (dt == DType::BF16 || dt == DType::F16) ? DType::F32 : dt;
  std::vector<Tensor> w;
  for (auto& t : ins)
    w.push_back(t.dtype() == work ? t.contiguous() : t.to(work));
  Tensor out = Tensor::empty(out_shape, work);
  if (work == DType::F64)
    fn(w, out, double{});
  else
    fn(w, out, float{});
  return dt == work ? out : out.to(dt);
}

template <typename Op>
LocalKernel binary(Op op) {
  return [op](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& a = c.local(0);
    return {compute({a, c.local(1)}, a.shape(), [&](auto& w, Tensor& out, auto tag) {
      using T = decltype(tag);
      const auto n = out.numel();
      Vec<T>(out.data<T>(), n) =
          op(CVec<T>(w[0].template data<T>(), n), CVec<T>(w[1].template data<T>(), n));
    })};
  };
}

template <typename Op>
LocalKernel unary(Op op) {
  return [op](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& a = c.local(0);
    const double s = c.schema.size() > 1 && !c.schema.is_dtensor(1) ? c.schema.scalar(1) : 0.0;
    return {compute({a}, a.shape(), [&](auto& w, Tensor& out, auto tag) {
      using T = decltype(tag);
      const auto n = out.numel();
      Vec<T>(out.data<T>(), n) = op(CVec<T>(w[0].template data<T>(), n), static_cast<T>(s));
    })};
  };
}

// Sum of the local elements, divided by `divisor`; accumulated in f64 so a
// sharded sum and a single-process sum agree to rounding of the final value.
LocalKernel reduction(bool mean) {
  return [mean](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor a = c.local(0).to(DType::F64);
    double s = CVec<double>(a.data<double>(), a.numel()).sum();
    if (mean) s /= static_cast<double>(shape_numel(c.input_specs.at(0).shape()));
    return {Tensor::full({}, s, c.local(0).dtype())};
  };
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      const auto cpu = DeviceType::CPU;
      register_kernel("add", cpu, dt, binary([](auto a, auto b) { return a + b; }));
      register_kernel("mul", cpu, dt, binary([](auto a, auto b) { return a * b; }));
      register_kernel("relu_backward", cpu, dt,
                      binary([](auto g, auto x) { return (x > 0).select(g, 0); }));
      register_kernel("scale", cpu, dt, unary([](auto a, auto s) { return a * s; }));
      register_kernel("relu", cpu, dt, unary([](auto a, auto) { return a.max(0); }));
      register_kernel("sum", cpu, dt, reduction(false));
      register_kernel("mean", cpu, dt, reduction(true));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor
