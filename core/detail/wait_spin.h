// How long a rank that waits for a message spins before it sleeps.
//
// Sleeping (a futex) hands the core to the kernel: on a virtual machine the
// virtual CPU halts, and waking it again costs the wait a scheduling round
// trip through the host, after which the rank computed slower (measured; the
// cause, likely caches gone cold, could not be counted: the VMs measured on
// expose no hardware counters). A rank with a core of its own has nothing to give the
// core to, so it spins through the short waits a training step is made of
// (the norms' statistics, the halos: tens of microseconds to a few
// milliseconds). Where ranks share cores, a spinning rank would take the core
// from the peer it waits for, so it spins only briefly.
//
// Measured (docs/performance-p2-step.md, "A rank with a core of its own
// spins"): the U-Net step at P = 2, bound, 2x8x128x128, 31.03 -> 28.63 ms
// with a 3 ms spin against 50 us; a 500 us spin changed nothing.
#pragma once

#include <chrono>

#include "core/detail/cpu_budget.h"
#include "dtensor/core/config.h"

namespace dtensor::detail {

/// The spin of a rank of a group with `local_ranks` ranks on this host, with
/// `cpus` (core/detail/cpu_budget.h): Config::wait_spin_us when set; else
/// 3 ms when the ranks on this host (the larger of `local_ranks` and
/// Config::local_world_size) times each rank's OpenMP threads
/// (Config::omp_num_threads; unset: OpenMP's one per CPU it may run on) fit
/// in the host's CPUs (its cgroup's cpuset, capped by a CPU quota) and the
/// rank's threads fit in its own (its affinity, capped alike); else 50 us.
std::chrono::microseconds wait_spin(const Config& cfg, int local_ranks,
                                    const cpu_budget::Budget& cpus);

}  // namespace dtensor::detail
