#include "dtensor/ops/plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/ops/dispatch.h"
#include "ops/detail/plugin_fingerprint.h"
#include "ops/detail/registry_snapshot.h"

namespace dtensor {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_loaded;  // canonical paths
std::size_t g_fingerprint = 0;      // of the loaded plugins' file names
std::string g_names;                // their file names, for messages

}  // namespace

namespace detail {
std::size_t loaded_plugins_fingerprint() {
  std::lock_guard lock(g_mutex);
  return g_fingerprint;
}
std::string loaded_plugins_description() {
  std::lock_guard lock(g_mutex);
  return g_names.empty() ? std::string() : " (plugins: " + g_names + ")";
}
}  // namespace detail

void load_plugin(const std::string& path) {
  std::error_code ec;
  const auto canonical = std::filesystem::canonical(path, ec);
  DTENSOR_CHECK_ARG(!ec, "plugin", "load_plugin: '{}' does not exist ({})", path, ec.message());
  std::lock_guard lock(g_mutex);
  for (auto& p : g_loaded)
    if (p == canonical.string()) return;  // registration already ran
  // RTLD_LOCAL: two plugins may use the same internal symbol names.
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  DTENSOR_CHECK_ARG(handle != nullptr, "plugin", "load_plugin: cannot open '{}': {}", path,
                    dlerror());
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
  // All or nothing: a registration that throws halfway leaves the registry
  // as it was (what it had registered would otherwise stay, half-usable).
  detail::RegistrySnapshot before;
  try {
    reg();  // the library stays loaded: its kernels and handlers are now registered
  } catch (const std::exception& e) {
    before.restore();
    clear_propagation_cache();  // strategies the plugin registered may have been used
    dlclose(handle);
    throw InvalidArgument("plugin",
                          fmt::format("load_plugin: '{}': its registration failed, nothing it "
                                      "registered was kept: {}",
                                      path, e.what()));
  }
  g_loaded.push_back(canonical.string());
  // The file name, not the path: the same plugin may live in another
  // directory on another host.
  const std::string name = canonical.filename().string();
  g_fingerprint = g_fingerprint * 1099511628211ull ^ std::hash<std::string>()(name) ^ 0x27d4eb2d;
  g_names += (g_names.empty() ? "" : ", ") + name;
  log::info("loaded plugin {}", canonical.string());
}

std::vector<std::string> loaded_plugins() {
  std::lock_guard lock(g_mutex);
  return g_loaded;
}

}  // namespace dtensor
