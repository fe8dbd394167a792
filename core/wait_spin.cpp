#include "core/detail/wait_spin.h"

#include <algorithm>

namespace dtensor::detail {

std::chrono::microseconds wait_spin(const Config& cfg, int local_ranks,
                                    const cpu_budget::Budget& cpus) {
  if (cfg.wait_spin_us) return std::chrono::microseconds(*cfg.wait_spin_us);
  constexpr std::chrono::microseconds kOwnCore{3000}, kSharedCore{50};
  if (cpus.affinity <= 0 && cpus.cpuset <= 0) return kSharedCore;  // nothing known
  const long ranks = std::max<long>(local_ranks, cfg.local_world_size.value.value_or(0));
  // OpenMP's default: a thread for every CPU the process may run on.
  const long threads = cfg.omp_num_threads.value_or(static_cast<int>(cpus.own()));
  // The host's ranks fit the CPUs they share (binding one rank does not
  // narrow that count, a quota does), and this rank's threads fit its own.
  return ranks * threads <= cpus.host() && threads <= cpus.own() ? kOwnCore : kSharedCore;
}

}  // namespace dtensor::detail
