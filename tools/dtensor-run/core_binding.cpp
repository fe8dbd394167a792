// Why bind: on a machine with as many ranks as cores, an unbound rank's
// threads (its own, OpenMP's, Gloo's event loop) are placed wherever the
// scheduler likes, and a rank's messages can wait for a CPU busy with
// another rank's computation. Bound, each rank's threads share its own
// cores only. Measured with dtensor-conv --bench (3x3 64->64 256^2, P = 2,
// docs/performance.md).
#include "tools/dtensor-run/core_binding.h"

#include <sched.h>

namespace dtensor::run {

std::vector<std::vector<int>> core_slices(int nproc, const std::vector<int>& allowed) {
  std::vector<std::vector<int>> slices(static_cast<std::size_t>(nproc > 0 ? nproc : 0));
  const int n = static_cast<int>(allowed.size());
  if (n == 0 || nproc <= 0) return slices;
  if (n < nproc) {
    for (int r = 0; r < nproc; ++r)
      slices[static_cast<std::size_t>(r)] = {allowed[static_cast<std::size_t>(r % n)]};
    return slices;
  }
  const int base = n / nproc, extra = n % nproc;
  int at = 0;
  for (int r = 0; r < nproc; ++r) {
    const int count = base + (r < extra ? 1 : 0);
    for (int k = 0; k < count; ++k)
      slices[static_cast<std::size_t>(r)].push_back(allowed[static_cast<std::size_t>(at++)]);
  }
  return slices;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace dtensor::run
