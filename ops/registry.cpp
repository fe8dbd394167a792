#include "dtensor/ops/registry.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <set>
#include <typeindex>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/ops/kernel.h"
#include "ops/detail/kernel_lookup_log.h"
#include "ops/detail/registry_snapshot.h"

namespace dtensor {
namespace {

// One kernel of any slot: the function, and the arguments type it was
// registered with (a lookup with another type is refused, not cast).
struct TypedKernel {
  std::type_index args = std::type_index(typeid(void));
  std::shared_ptr<const void> fn;
};

// Entries are created by whichever registration comes first (the op's
// definition, a kernel or a handler), so static registrars in different
// translation units may run in any order. A kernel slot ("norm.moments") is
// an entry with kernels only; an operator's default-path kernels are typed
// LocalKernel.
struct OpEntry {
  std::shared_ptr<OpDef> def;
  std::map<std::pair<DeviceType, DType>, TypedKernel> kernels;
  std::shared_ptr<OpHandler> handler;
  HandlerOptions handler_options;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, OpEntry> ops;
  std::set<detail::KernelKey>* lookup_log = nullptr;  // a KernelLookupLog's, while it lives
};

Registry& registry() {
  static Registry r;
  return r;
}

void check_name(const std::string& op) {
  check_arg(!op.empty(), "registry", "operator name must not be empty");
}

}  // namespace

std::string ShardingStrategy::str() const {
  std::string s;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    s += (i ? ", " : "") + placements_str(inputs[i]);
  s += " -> ";
  for (std::size_t i = 0; i < outputs.size(); ++i)
    s += (i ? ", " : "") + placements_str(outputs[i]);
  return s;
}

const Tensor& KernelCall::local(std::size_t i) const {
  DTENSOR_CHECK_ARG(i < local_args.size() && std::holds_alternative<Tensor>(local_args[i]),
                    "dispatch", "{}: argument {} is not a tensor", schema.op(), i);
  return std::get<Tensor>(local_args[i]);
}

void register_op(OpDef def, bool override_existing) {
  check_name(def.name);
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto& e = r.ops[def.name];
  check_arg(
      !e.def || override_existing, "registry",
      "register_op: operator '{}' is already registered (pass override_existing to replace it)",
      def.name);
  if (e.def) log::warn("register_op: replacing the definition of operator '{}'", def.name);
  e.def = std::make_shared<OpDef>(std::move(def));
}

void register_kernel(const std::string& op, DeviceType device, DType dtype, LocalKernel kernel,
                     bool override_existing) {
  check_arg(static_cast<bool>(kernel), "registry", "register_kernel: empty kernel for '{}'", op);
  detail::register_typed_kernel(op, device, dtype, std::type_index(typeid(LocalKernel)),
                                std::make_shared<const LocalKernel>(std::move(kernel)),
                                override_existing);
}

namespace detail {

void register_typed_kernel(const std::string& name, DeviceType device, DType dtype,
                           std::type_index args, std::shared_ptr<const void> fn,
                           bool override_existing) {
  check_name(name);
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.ops[name].kernels[{device, dtype}];
  DTENSOR_CHECK_ARG(
      !slot.fn || override_existing, "registry",
      "register_kernel: '{}' already has a {} {} kernel (pass override_existing to replace it)",
      name, device_type_name(device), dtype_name(dtype));
  DTENSOR_CHECK_ARG(!slot.fn || slot.args == args, "registry",
                    "register_kernel: '{}' takes other arguments than the kernel given for {} {}",
                    name, device_type_name(device), dtype_name(dtype));
  if (slot.fn)
    log::warn("register_kernel: replacing the {} {} kernel of '{}'", device_type_name(device),
              dtype_name(dtype), name);
  slot = TypedKernel{args, std::move(fn)};
}

const void* typed_kernel(const std::string& name, DeviceType device, DType dtype,
                         std::type_index args) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.lookup_log) r.lookup_log->emplace(name, device, dtype);
  auto it = r.ops.find(name);
  if (it != r.ops.end()) {
    auto k = it->second.kernels.find({device, dtype});
    if (k != it->second.kernels.end() && k->second.fn) {
      DTENSOR_CHECK_ARG(k->second.args == args, "registry",
                        "kernel '{}' for {} {} was registered with other arguments", name,
                        device_type_name(device), dtype_name(dtype));
      return k->second.fn.get();
    }
  }
  throw NotSupported("dispatch", fmt::format("'{}' has no kernel for {} {} tensors", name,
                                             device_type_name(device), dtype_name(dtype)));
}

KernelLookupLog::KernelLookupLog() : keys_(std::make_unique<std::set<KernelKey>>()) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  check_arg(r.lookup_log == nullptr, "registry", "a KernelLookupLog is already recording");
  r.lookup_log = keys_.get();
}

KernelLookupLog::~KernelLookupLog() {
  auto& r = registry();
  {
    std::lock_guard lock(r.mutex);
    r.lookup_log = nullptr;
  }
}

std::set<KernelKey> KernelLookupLog::keys() const {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return *keys_;
}

std::set<KernelKey> registered_kernel_keys() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::set<KernelKey> keys;
  for (const auto& [name, e] : r.ops)
    for (const auto& [key, k] : e.kernels)
      if (k.fn) keys.emplace(name, key.first, key.second);
  return keys;
}

bool has_typed_kernel(const std::string& name, DeviceType device, DType dtype) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(name);
  if (it == r.ops.end()) return false;
  auto k = it->second.kernels.find({device, dtype});
  return k != it->second.kernels.end() && k->second.fn;
}

}  // namespace detail

void register_op_handler(const std::string& op, OpHandler handler, bool override_existing,
                         HandlerOptions options) {
  check_name(op);
  check_arg(static_cast<bool>(handler), "registry", "register_op_handler: empty handler for '{}'",
            op);
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto& e = r.ops[op];
  check_arg(
      !e.handler || override_existing, "registry",
      "register_op_handler: '{}' already has a handler (pass override_existing to replace it)", op);
  if (e.handler) log::warn("register_op_handler: replacing the handler of operator '{}'", op);
  e.handler = std::make_shared<OpHandler>(std::move(handler));
  e.handler_options = options;
}

void unregister_op(const std::string& op) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.ops.erase(op);
}

bool has_op(const std::string& op) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(op);
  return it != r.ops.end() && (it->second.def || it->second.handler);
}

std::vector<std::string> registered_ops() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (auto& [name, e] : r.ops)
    if (e.def || e.handler) out.push_back(name);
  return out;
}

// Entries are never erased while a call runs (unregister_op is for plugins
// being unloaded between calls), so references stay valid for the call.
const OpDef& op_def(const std::string& op) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(op);
  check_arg(it != r.ops.end() && it->second.def, "dispatch",
            "unknown operator '{}': no definition is registered (register_op)", op);
  return *it->second.def;
}

const OpDef* find_op_def(const std::string& op) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(op);
  return it != r.ops.end() ? it->second.def.get() : nullptr;
}

const LocalKernel& op_kernel(const std::string& op, DeviceType device, DType dtype) {
  try {
    return *static_cast<const LocalKernel*>(
        detail::typed_kernel(op, device, dtype, std::type_index(typeid(LocalKernel))));
  } catch (const NotSupported&) {
    throw NotSupported("dispatch", fmt::format("operator '{}' has no kernel for {} {} tensors", op,
                                               device_type_name(device), dtype_name(dtype)));
  }
}

const OpHandler* find_handler(const std::string& op) {
  HandlerOptions ignored;
  return find_handler(op, ignored);
}

const OpHandler* find_handler(const std::string& op, HandlerOptions& options) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(op);
  if (it == r.ops.end() || !it->second.handler) return nullptr;
  options = it->second.handler_options;
  return it->second.handler.get();
}

std::optional<OpHandler> current_handler(const std::string& op, HandlerOptions* options) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.ops.find(op);
  if (it == r.ops.end() || !it->second.handler) return std::nullopt;
  if (options) *options = it->second.handler_options;
  return *it->second.handler;  // a copy: it stays callable whatever replaces it
}

namespace detail {

// The entries hold shared pointers, so a snapshot is a copy of the map: the
// definitions and handlers it points at stay alive (and unchanged: a
// registration replaces pointers, never the objects) until it is dropped.
struct RegistrySnapshot::Data {
  std::map<std::string, OpEntry> ops;
};

RegistrySnapshot::RegistrySnapshot() : data_(std::make_unique<Data>()) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  data_->ops = r.ops;
}

RegistrySnapshot::~RegistrySnapshot() = default;

void RegistrySnapshot::restore() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.ops = data_->ops;
}

}  // namespace detail

}  // namespace dtensor
