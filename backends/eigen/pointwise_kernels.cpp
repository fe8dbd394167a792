// CPU kernels of the reductions to a scalar (sum, mean), with Eigen. The
// element-wise operators' kernels are in backends/cpu/elementwise_kernels.cpp.
#include <Eigen/Core>

#include "dtensor/ops/registry.h"

namespace dtensor {
namespace {

template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

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
      register_kernel("sum", DeviceType::CPU, dt, reduction(false));
      register_kernel("mean", DeviceType::CPU, dt, reduction(true));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor
