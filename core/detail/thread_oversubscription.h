// P ranks on a host, each running T OpenMP threads, on fewer than P x T
// cores: every rank's compute threads wait for one another's and for the
// communication threads, and steps get slower, not faster, with more ranks.
// It is easy to get by accident (OpenMP's default is one thread per core, in
// every rank), so init_process_group says so once.
#pragma once

#include "dtensor/core/config.h"

namespace dtensor::detail {

/// Logs a warning (once per process, on local rank 0) when
/// Config::local_world_size ranks x Config::omp_num_threads (unset: the
/// cores) exceed the cores this process may run on (sched_getaffinity,
/// capped by its cgroup's CPU quota: core/detail/cpu_budget.h) and
/// each rank runs more than one thread. Nothing when the ranks on this host
/// are not known.
void warn_if_oversubscribed(const Config& cfg);

}  // namespace dtensor::detail
