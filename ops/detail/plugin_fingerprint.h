// Which plugins this process has loaded, as a number that dispatch folds
// into every call's agreement fingerprint: a plugin loaded on some ranks only
// (which may define or replace operators there) makes the next call disagree
// on every rank, instead of one rank running another handler than the rest.
#pragma once

#include <cstddef>
#include <string>

namespace dtensor::detail {

/// 0 when no plugin is loaded; otherwise a hash of the plugins' file names.
std::size_t loaded_plugins_fingerprint();
/// " (plugins: a.so, b.so)" or "" (for the agreement check's descriptions).
std::string loaded_plugins_description();

}  // namespace dtensor::detail
