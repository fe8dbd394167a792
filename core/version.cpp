#include "dtensor/core/version.h"

namespace dtensor {
std::string version() {
  return DTENSOR_VERSION_STRING;
}
}  // namespace dtensor
