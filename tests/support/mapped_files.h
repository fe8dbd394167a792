// The shared objects mapped into this process (/proc/self/maps): an
// independent view of what the dynamic loader did, for the tests of the
// run-time modules.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace dtensor::testing {

inline std::string mapped_files() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream s;
  s << maps.rdbuf();
  return s.str();
}

}  // namespace dtensor::testing
