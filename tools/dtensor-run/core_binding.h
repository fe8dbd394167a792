// --bind-cores: which CPUs each local rank may run on.
#pragma once

#include <vector>

namespace dtensor::run {

/// Splits `allowed` (the CPUs the launcher may use, in order) among `nproc`
/// local ranks: disjoint, contiguous slices, the first `allowed.size() %
/// nproc` ranks getting one CPU more. With fewer CPUs than ranks, rank r gets
/// CPU allowed[r % allowed.size()] alone (ranks then share CPUs, evenly).
/// Empty `allowed` gives empty slices (no binding).
std::vector<std::vector<int>> core_slices(int nproc, const std::vector<int>& allowed);

/// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

}  // namespace dtensor::run
