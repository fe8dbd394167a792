#pragma once

#include <string>

namespace dtensor {
/// The library's version, e.g. "0.1.0".
std::string version();
}  // namespace dtensor
