// How many OpenMP threads each rank of a host gets when the user has not
// said (OMP_NUM_THREADS unset): its share of the CPUs this process may run
// on, or of its container's CPU limit. Without it every rank starts one thread per core, and P ranks on one
// host run P times as many threads as there are cores. Shared by dtensor-run
// and the test harness.
#pragma once

#include <optional>
#include <string>

namespace dtensor::launch {

/// CPUs this process may run on (sched_getaffinity), or fewer under its
/// cgroup's CPU quota (a container's CPU limit: core/detail/cpu_budget.h),
/// at least 1.
int usable_cpus();

/// cpus / ranks_on_host, at least 1.
int thread_share(int cpus, int ranks_on_host);

/// The OMP_NUM_THREADS to give each of `ranks_on_host` ranks: nullopt when
/// `user_value` (the launcher's own OMP_NUM_THREADS, nullptr when unset) is
/// set and not empty, which the ranks then inherit.
std::optional<std::string> default_omp_threads(const char* user_value, int ranks_on_host);

}  // namespace dtensor::launch
