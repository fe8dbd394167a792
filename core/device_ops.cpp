#include "core/detail/device_ops.h"

#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "core/detail/device_module.h"
#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::map<DeviceType, std::shared_ptr<DeviceOps>> ops;
  std::optional<int> local_rank;
};
// Function-local: backends register from static initialisers.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_device_ops(DeviceType type, std::shared_ptr<DeviceOps> ops) {
  Registry& r = registry();
  std::optional<int> local_rank;
  {
    std::lock_guard lock(r.mu);
    r.ops[type] = ops;
    local_rank = r.local_rank;
  }
  // A backend registered after init_process_group still uses the rank's device.
  if (local_rank && ops) ops->select_local_device(*local_rank);
}

std::shared_ptr<DeviceOps> registered_device_ops(DeviceType type) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.ops.find(type);
  return it == r.ops.end() ? nullptr : it->second;
}

std::shared_ptr<DeviceOps> find_device_ops(DeviceType type) {
  if (auto ops = registered_device_ops(type)) return ops;
  // Outside the registry's lock: the module's registration takes it.
  if (!load_device_module(type)) return nullptr;
  return registered_device_ops(type);
}

DeviceOps& device_ops(DeviceType type, const char* what) {
  auto ops = find_device_ops(type);
  if (!ops)
    throw NotSupported("core", fmt::format("{} on {} tensors: {}", what, device_type_name(type),
                                           device_module_error(type)));
  // Registrations live until exit, so the reference outlives the caller.
  return *ops;
}

void set_device_local_rank(int local_rank) {
  Registry& r = registry();
  std::map<DeviceType, std::shared_ptr<DeviceOps>> ops;
  {
    std::lock_guard lock(r.mu);
    r.local_rank = local_rank;
    ops = r.ops;
  }
  for (auto& [type, o] : ops)
    o->select_local_device(local_rank);
}

}  // namespace dtensor::detail
