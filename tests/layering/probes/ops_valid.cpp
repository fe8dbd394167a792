// ops may include the public headers of core and placement, and its own.
#include "dtensor/core/tensor.h"
#include "dtensor/ops/registry.h"
#include "dtensor/placement/dtensor.h"
#include "ops/detail/registry_snapshot.h"

int probe_ops_valid() {
  return dtensor::Tensor::zeros({1}, dtensor::DType::F32).dim();
}
