// placement may include core's public headers and its own.
#include "dtensor/core/tensor.h"
#include "dtensor/placement/dtensor.h"

int probe_placement_valid() {
  return dtensor::Tensor::zeros({1}, dtensor::DType::F32).dim();
}
