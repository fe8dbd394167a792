#include "core/detail/device_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/detail/device_module_search.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

#define DTENSOR_STR2(x) #x
#define DTENSOR_STR(x) DTENSOR_STR2(x)

namespace dtensor::detail {
namespace {

struct ModuleState {
  std::mutex mu;
  bool tried = false;
  bool loaded = false;
  std::string path;   // where it was loaded from
  std::string error;  // why it was not
};

// Never destroyed: a module's registrations outlive every static.
ModuleState& cuda_state() {
  static auto* s = new ModuleState();
  return *s;
}

std::string not_found_message(const std::vector<std::string>& tried, bool explicit_path) {
  std::string msg = fmt::format("the CUDA module {} was not found (looked for {})",
                                DTENSOR_CUDA_MODULE_FILE, fmt::join(tried, ", "));
  if (explicit_path) return msg + "; DTENSOR_CUDA_MODULE names a file that does not exist";
  if (!DTENSOR_CUDA_MODULE_BUILT) return msg + ": libdtensor was built without CUDA";
  return msg + "; install it next to libdtensor.so or set DTENSOR_CUDA_MODULE to its path";
}

// dlopen + the entry points + the version check; nullptr and `why` on failure.
void* open_module(const std::string& path, std::string& why) {
  // RTLD_LOCAL: the module's CUDA symbols stay its own; the library reaches it
  // only through what it registers.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    why = fmt::format("cannot load the CUDA module {}: {}", path, dlerror());
    return nullptr;
  }
  using VersionFn = const char* (*)();
  auto version =
      reinterpret_cast<VersionFn>(dlsym(handle, DTENSOR_STR(DTENSOR_DEVICE_MODULE_VERSION_FN)));
  auto reg = dlsym(handle, DTENSOR_STR(DTENSOR_DEVICE_MODULE_REGISTER_FN));
  if (!version || !reg) {
    why = fmt::format("{} is not a libdtensor device module (it has no {} and {})", path,
                      DTENSOR_STR(DTENSOR_DEVICE_MODULE_VERSION_FN),
                      DTENSOR_STR(DTENSOR_DEVICE_MODULE_REGISTER_FN));
  } else if (const std::string built_for = version(); built_for != DTENSOR_VERSION_STRING) {
    why = fmt::format("the CUDA module {} was built for libdtensor {}, this is libdtensor {}", path,
                      built_for, DTENSOR_VERSION_STRING);
  } else {
    return handle;
  }
  dlclose(handle);
  return nullptr;
}

// Opens, checks and registers the first candidate that exists; the error names
// the module and the cause otherwise.
void load_cuda_module(ModuleState& s, const std::optional<std::string>& explicit_path) {
  const auto candidates = device_module_candidates(DTENSOR_CUDA_MODULE_FILE, explicit_path,
                                                   library_directory(), DTENSOR_INSTALL_LIBDIR);
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    // A module that is there but cannot load is the answer: no other copy is
    // tried behind the user's back.
    void* handle = open_module(path, s.error);
    if (!handle) return;
    try {
      using RegisterFn = void (*)();
      auto reg = reinterpret_cast<RegisterFn>(
          dlsym(handle, DTENSOR_STR(DTENSOR_DEVICE_MODULE_REGISTER_FN)));
      reg();  // the module stays loaded: what it registered refers to its code
    } catch (const std::exception& e) {
      s.error = fmt::format("the CUDA module {} failed to register: {}", path, e.what());
      return;
    }
    s.loaded = true;
    s.path = path;
    s.error.clear();
    log::info("loaded the CUDA module {}", path);
    return;
  }
  s.error = not_found_message(candidates, explicit_path.has_value());
}

}  // namespace

void* open_device_module(const std::string& path) {
  std::string why;
  void* handle = open_module(path, why);
  if (!handle) throw NotSupported("core", why);
  return handle;
}

bool load_device_module(DeviceType type) {
  if (type != DeviceType::CUDA) return false;
  ModuleState& s = cuda_state();
  std::lock_guard lock(s.mu);
  if (!s.tried) {
    // Read first: a bad DTENSOR_CUDA_MODULE throws and leaves the load untried.
    const std::optional<std::string> explicit_path = config().cuda_module;
    s.tried = true;
    load_cuda_module(s, explicit_path);
  }
  return s.loaded;
}

std::string device_module_error(DeviceType type) {
  if (type != DeviceType::CUDA)
    return fmt::format("no device module provides {} tensors", device_type_name(type));
  ModuleState& s = cuda_state();
  std::lock_guard lock(s.mu);
  if (!s.tried) return "the CUDA module has not been loaded yet";
  return s.error;
}

std::string device_module_path(DeviceType type) {
  if (type != DeviceType::CUDA) return "";
  ModuleState& s = cuda_state();
  std::lock_guard lock(s.mu);
  return s.path;
}

}  // namespace dtensor::detail
