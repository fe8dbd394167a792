// core may include its own headers, public and internal.
#include "core/detail/device_ops.h"
#include "dtensor/core/tensor.h"

int probe_core_valid() {
  return dtensor::Tensor::zeros({1}, dtensor::DType::F32).dim();
}
