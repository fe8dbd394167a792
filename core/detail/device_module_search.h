// Where a device module is looked for: a pure function of the configuration
// and two directories, so the order is unit-tested without installing anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtensor::detail {

/// The paths tried for the module `file`, in order. An explicit path
/// (DTENSOR_CUDA_MODULE) is the only one: a configured choice is never
/// silently replaced by another copy. Otherwise `file` next to libdtensor.so
/// (`library_dir`, which follows a moved install tree), then in the install
/// libdir; empty directories and repeats are left out.
std::vector<std::string> device_module_candidates(const std::string& file,
                                                  const std::optional<std::string>& explicit_path,
                                                  const std::string& library_dir,
                                                  const std::string& install_libdir);

/// The directory libdtensor.so was loaded from (dladdr), or "" if unknown.
std::string library_directory();

}  // namespace dtensor::detail
