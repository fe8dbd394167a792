// The CPU kernel of "to" (ops/dtype_cast_op.cpp): the input's local tensor
// converted to the dtype named in the call, by the core conversion every
// Tensor::copy_ uses (round to nearest even into bf16 and f16).
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

std::vector<Tensor> convert(const KernelCall& c) {
  const Tensor& x = c.local(0);
  Tensor y = Tensor::empty(x.shape(), parse_dtype(c.schema.text(1)), x.device());
  y.copy_(x);
  return {y};
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
      register_kernel("to", DeviceType::CPU, dt, convert);
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
