#include "core/detail/device_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/detail/device_module_search.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::detail {
namespace {

#define DTENSOR_STR2(x) #x
#define DTENSOR_STR(x) DTENSOR_STR2(x)

// What differs between modules: their name in messages, their file, the
// variable that names an explicit path, and whether this build made them.
struct ModuleSpec {
  const char* name;      // "CUDA"
  const char* file;      // "libdtensor-cuda.so"
  const char* variable;  // "DTENSOR_CUDA_MODULE"
  bool built;
  std::optional<std::string> Config::*explicit_path;
};

const ModuleSpec& spec(Module m) {
  static const ModuleSpec cuda{"CUDA", DTENSOR_CUDA_MODULE_FILE, "DTENSOR_CUDA_MODULE",
                               DTENSOR_CUDA_MODULE_BUILT != 0, &Config::cuda_module};
  static const ModuleSpec mpi{"MPI", DTENSOR_MPI_MODULE_FILE, "DTENSOR_MPI_MODULE",
                              DTENSOR_MPI_MODULE_BUILT != 0, &Config::mpi_module};
  return m == Module::Cuda ? cuda : mpi;
}

struct ModuleState {
  std::mutex mu;
  bool tried = false;
  bool loaded = false;
  std::string path;   // where it was loaded from
  std::string error;  // why it was not
};

// Never destroyed: a module's registrations outlive every static.
ModuleState& state(Module m) {
  static auto* cuda = new ModuleState();
  static auto* mpi = new ModuleState();
  return m == Module::Cuda ? *cuda : *mpi;
}

std::string not_found_message(const ModuleSpec& s, const std::vector<std::string>& tried,
                              bool explicit_path) {
  std::string msg = fmt::format("the {} module {} was not found (looked for {})", s.name, s.file,
                                fmt::join(tried, ", "));
  if (explicit_path) return fmt::format("{}; {} names a file that does not exist", msg, s.variable);
  if (!s.built) return fmt::format("{}: libdtensor was built without {}", msg, s.name);
  return fmt::format("{}; install it next to libdtensor.so or set {} to its path", msg, s.variable);
}

// Opens, checks and registers the first candidate that exists; the error names
// the module and the cause otherwise.
void load(const ModuleSpec& spec, ModuleState& s, const std::optional<std::string>& explicit_path) {
  const auto candidates = device_module_candidates(spec.file, explicit_path, library_directory(),
                                                   DTENSOR_INSTALL_LIBDIR);
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    try {
      void* handle = open_device_module(path, spec.name);
      using RegisterFn = void (*)();
      auto reg = reinterpret_cast<RegisterFn>(
          dlsym(handle, DTENSOR_STR(DTENSOR_DEVICE_MODULE_REGISTER_FN)));
      reg();  // the module stays loaded: what it registered refers to its code
      s.loaded = true;
      s.path = path;
      s.error.clear();
      log::info("loaded the {} module {}", spec.name, path);
    } catch (const std::exception& e) {
      // A module that is there but cannot load is the answer: no other copy
      // is tried behind the user's back.
      s.error = e.what();
    }
    return;
  }
  s.error = not_found_message(spec, candidates, explicit_path.has_value());
}

}  // namespace

void* open_device_module(const std::string& path, const std::string& name) {
  // RTLD_LOCAL: the module's CUDA or MPI symbols stay its own; the library
  // reaches it only through what it registers.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw NotSupported("core",
                       fmt::format("cannot load the {} module {}: {}", name, path, dlerror()));
  using VersionFn = const char* (*)();
  auto version =
      reinterpret_cast<VersionFn>(dlsym(handle, DTENSOR_STR(DTENSOR_DEVICE_MODULE_VERSION_FN)));
  auto reg = dlsym(handle, DTENSOR_STR(DTENSOR_DEVICE_MODULE_REGISTER_FN));
  if (!version || !reg) {
    dlclose(handle);
    throw NotSupported("core", fmt::format("{} is not a libdtensor device module (it has no {} "
                                           "and {})",
                                           path, DTENSOR_STR(DTENSOR_DEVICE_MODULE_VERSION_FN),
                                           DTENSOR_STR(DTENSOR_DEVICE_MODULE_REGISTER_FN)));
  }
  const std::string built_for = version();
  if (built_for != DTENSOR_VERSION_STRING) {
    dlclose(handle);
    throw NotSupported("core", fmt::format("the {} module {} was built for libdtensor {}, this "
                                           "is libdtensor {}",
                                           name, path, built_for, DTENSOR_VERSION_STRING));
  }
  return handle;
}

bool load_module(Module m) {
  const ModuleSpec& sp = spec(m);
  ModuleState& s = state(m);
  std::lock_guard lock(s.mu);
  if (!s.tried) {
    // Read first: a bad DTENSOR_*_MODULE throws and leaves the load untried.
    const std::optional<std::string> explicit_path = config().*sp.explicit_path;
    s.tried = true;
    load(sp, s, explicit_path);
  }
  return s.loaded;
}

std::string module_error(Module m) {
  ModuleState& s = state(m);
  std::lock_guard lock(s.mu);
  if (!s.tried) return fmt::format("the {} module has not been loaded yet", spec(m).name);
  return s.error;
}

std::string module_path(Module m) {
  ModuleState& s = state(m);
  std::lock_guard lock(s.mu);
  return s.path;
}

bool load_device_module(DeviceType type) {
  return type == DeviceType::CUDA && load_module(Module::Cuda);
}

std::string device_module_error(DeviceType type) {
  if (type != DeviceType::CUDA)
    return fmt::format("no device module provides {} tensors", device_type_name(type));
  return module_error(Module::Cuda);
}

std::string device_module_path(DeviceType type) {
  return type == DeviceType::CUDA ? module_path(Module::Cuda) : "";
}

}  // namespace dtensor::detail
