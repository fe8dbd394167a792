// The public dtensor::cuda API (dtensor/cuda.h), in the core: it asks the
// CUDA module (loaded on the first call, core/detail/device_module.h) through
// DeviceOps, and answers "not available" with the reason when there is no
// module, driver or device.
#include <fmt/format.h>

#include "core/detail/device_module.h"
#include "core/detail/device_ops.h"
#include "dtensor/core/errors.h"
#include "dtensor/cuda.h"

namespace dtensor::cuda {
namespace {

std::shared_ptr<detail::DeviceOps> ops() {
  return detail::find_device_ops(DeviceType::CUDA);
}

}  // namespace

bool is_built() {
  return ops() != nullptr;
}
bool is_available() {
  auto o = ops();
  return o && o->device_count() > 0;
}
int device_count() {
  auto o = ops();
  return o ? o->device_count() : 0;
}
std::string unavailable_reason() {
  auto o = ops();
  if (!o) return detail::device_module_error(DeviceType::CUDA);
  return o->device_count() > 0 ? std::string() : o->unavailable_reason();
}
int current_device() {
  auto o = ops();
  return o && o->device_count() > 0 ? o->current_device() : 0;
}
void set_device(int index) {
  detail::device_ops(DeviceType::CUDA, fmt::format("set_device({})", index).c_str())
      .set_device(index);
}
void synchronize() {
  auto o = ops();
  if (o && o->device_count() > 0) o->synchronize();
}

}  // namespace dtensor::cuda
