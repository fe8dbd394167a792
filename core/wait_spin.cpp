#include "core/detail/wait_spin.h"

#include <algorithm>

namespace dtensor::detail {

std::chrono::microseconds wait_spin(const Config& cfg, int local_ranks, long cpus) {
  if (cfg.wait_spin_us) return std::chrono::microseconds(*cfg.wait_spin_us);
  constexpr std::chrono::microseconds kOwnCore{3000}, kSharedCore{50};
  const long ranks = std::max<long>(local_ranks, cfg.local_world_size.value.value_or(0));
  const long threads = cfg.omp_num_threads.value_or(static_cast<int>(cpus));
  return cpus > 0 && ranks * threads <= cpus ? kOwnCore : kSharedCore;
}

}  // namespace dtensor::detail
