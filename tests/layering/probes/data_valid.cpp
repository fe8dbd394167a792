// data may include the public headers below it, its own folder and, alone
// among the layers above it, checkpoint's internal folder.
#include "checkpoint/box.h"
#include "data/npy_header.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/data/load_sharded.h"
#include "dtensor/ops/registry.h"

int probe_data_valid() {
  return static_cast<int>(dtensor::data::npy_element_size(dtensor::data::NpyElement::F32));
}
