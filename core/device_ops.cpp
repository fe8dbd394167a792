#include "core/detail/device_ops.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::map<DeviceType, std::shared_ptr<DeviceOps>> ops;
};
// Function-local: backends register from static initialisers.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_device_ops(DeviceType type, std::shared_ptr<DeviceOps> ops) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.ops[type] = std::move(ops);
}

std::shared_ptr<DeviceOps> find_device_ops(DeviceType type) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.ops.find(type);
  return it == r.ops.end() ? nullptr : it->second;
}

DeviceOps& device_ops(DeviceType type, const char* what) {
  auto ops = find_device_ops(type);
  if (!ops)
    throw NotSupported("core", fmt::format("{} on {} tensors: libdtensor was built without CUDA",
                                           what, device_type_name(type)));
  // Registrations live until exit, so the reference outlives the caller.
  return *ops;
}

}  // namespace dtensor::detail
