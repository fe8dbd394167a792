// The public CUDA API in a build without CUDA (DTENSOR_WITH_CUDA=OFF, or AUTO
// without the toolkit): everything reports "not available" instead of failing,
// and no device ops or allocator are registered, so CUDA tensors raise
// NotSupported("... built without CUDA") from the core.
#include "dtensor/core/errors.h"
#include "dtensor/cuda.h"

namespace dtensor::cuda {

bool is_built() {
  return false;
}
bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return "libdtensor was built without CUDA (DTENSOR_WITH_CUDA=OFF or the toolkit was not found)";
}
int current_device() {
  return 0;
}
void set_device(int index) {
  throw NotSupported("cuda", "set_device(" + std::to_string(index) + "): " + unavailable_reason());
}
void synchronize() {}

}  // namespace dtensor::cuda
