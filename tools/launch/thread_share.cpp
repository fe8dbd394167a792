#include "tools/launch/thread_share.h"

#include <algorithm>

#include "core/detail/cpu_budget.h"

namespace dtensor::launch {

int usable_cpus() {
  return static_cast<int>(cpu_budget::read_budget().own());
}

int thread_share(int cpus, int ranks_on_host) {
  return std::max(1, cpus / std::max(1, ranks_on_host));
}

std::optional<std::string> default_omp_threads(const char* user_value, int ranks_on_host) {
  if (user_value && *user_value) return std::nullopt;
  return std::to_string(thread_share(usable_cpus(), ranks_on_host));
}

}  // namespace dtensor::launch
