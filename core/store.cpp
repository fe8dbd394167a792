#include "dtensor/core/store.h"

#include "dtensor/core/errors.h"

namespace dtensor {

bool Store::check(const std::vector<std::string>& keys) {
  try {
    wait(keys, std::chrono::milliseconds(1));
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

}  // namespace dtensor
