#include "dtensor/ops/plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_loaded;  // canonical paths

}  // namespace

void load_plugin(const std::string& path) {
  std::error_code ec;
  const auto canonical = std::filesystem::canonical(path, ec);
  check_arg(!ec, "plugin", "load_plugin: '{}' does not exist ({})", path, ec.message());
  std::lock_guard lock(g_mutex);
  for (auto& p : g_loaded)
    if (p == canonical.string()) return;  // registration already ran
  // RTLD_LOCAL: two plugins may use the same internal symbol names.
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  check_arg(handle != nullptr, "plugin", "load_plugin: cannot open '{}': {}", path, dlerror());
  using AbiFn = int (*)();
  using RegisterFn = void (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(handle, "dtensor_plugin_abi_version"));
  auto reg = reinterpret_cast<RegisterFn>(dlsym(handle, "dtensor_plugin_register"));
  if (!abi || !reg) {
    dlclose(handle);
    throw InvalidArgument("plugin", fmt::format("load_plugin: '{}' has no DTENSOR_PLUGIN entry "
                                                "point (dtensor_plugin_register)",
                                                path));
  }
  if (abi() != DTENSOR_PLUGIN_ABI_VERSION) {
    const int v = abi();
    dlclose(handle);
    throw InvalidArgument("plugin", fmt::format("load_plugin: '{}' was built for plugin ABI {}, "
                                                "this library has {}",
                                                path, v, DTENSOR_PLUGIN_ABI_VERSION));
  }
  reg();  // the library stays loaded: its kernels and handlers are now registered
  g_loaded.push_back(canonical.string());
  log::info("loaded plugin {}", canonical.string());
}

std::vector<std::string> loaded_plugins() {
  std::lock_guard lock(g_mutex);
  return g_loaded;
}

}  // namespace dtensor
