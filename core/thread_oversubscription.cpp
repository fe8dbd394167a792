#include "core/detail/thread_oversubscription.h"

#include <atomic>

#include "core/detail/cpu_budget.h"
#include "dtensor/core/logging.h"

namespace dtensor::detail {

void warn_if_oversubscribed(const Config& cfg) {
  static std::atomic<bool> warned{false};
  // Once per host (local rank 0 speaks for its host's ranks), and only when
  // known: without the launcher's count of local ranks there is no product.
  if (!cfg.local_world_size.value || warned.load()) return;
  if (cfg.local_rank.value && *cfg.local_rank.value != 0) return;
  const cpu_budget::Budget budget = cpu_budget::read_budget();
  if (budget.affinity <= 0) return;
  // The CPUs it may run on, or fewer under a cgroup's CPU quota.
  const long cores = budget.own();
  const long ranks = *cfg.local_world_size.value;
  // OpenMP's default: a thread for every core the process can run on.
  const long threads = cfg.omp_num_threads.value_or(static_cast<int>(cores));
  // One thread per rank and still more ranks than cores: the ranks themselves
  // were asked for, and fewer threads cannot help.
  if (threads <= 1 || ranks * threads <= cores || warned.exchange(true)) return;
  log::warn(
      "{} ranks on this host ({}) x {} threads each ({}) = {} threads on {} cores: the ranks "
      "will wait for one another's threads; set OMP_NUM_THREADS to at most {} (dtensor-run "
      "does when it is unset)",
      ranks, cfg.local_world_size.source, threads,
      cfg.omp_num_threads ? "OMP_NUM_THREADS" : "OMP_NUM_THREADS unset: one per core",
      ranks * threads, cores, cores / ranks > 0 ? cores / ranks : 1);
}

}  // namespace dtensor::detail
