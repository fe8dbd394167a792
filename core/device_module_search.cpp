#include "core/detail/device_module_search.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

namespace dtensor::detail {

std::vector<std::string> device_module_candidates(const std::string& file,
                                                  const std::optional<std::string>& explicit_path,
                                                  const std::string& library_dir,
                                                  const std::string& install_libdir) {
  if (explicit_path) return {*explicit_path};
  std::vector<std::string> paths;
  for (const std::string& dir : {library_dir, install_libdir}) {
    if (dir.empty()) continue;
    const std::string path = (std::filesystem::path(dir) / file).lexically_normal().string();
    if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
  }
  return paths;
}

std::string library_directory() {
  Dl_info info{};
  // Any function of libdtensor.so names the file it came from.
  if (dladdr(reinterpret_cast<const void*>(&library_directory), &info) == 0 || !info.dli_fname)
    return "";
  std::error_code ec;
  const auto path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string() : path.parent_path().string();
}

}  // namespace dtensor::detail
