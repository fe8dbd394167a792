// What the CLI reads of its own resident memory, for the peak-memory report
// (`rss_ratio*` in --json, docs/cli.md).
#pragma once

namespace dtensor::cli {

/// The resident set now, split as /proc/self/status splits it (MiB). Private
/// memory is `anon_mb`; `file_mb` is mapped files (library code, paged in as
/// it first runs and shared between the ranks of a node).
struct ResidentSet {
  double anon_mb = 0, file_mb = 0, shmem_mb = 0;
  double total_mb() const { return anon_mb + file_mb + shmem_mb; }
};
ResidentSet resident_now();

/// The process's peak resident set (VmHWM) so far, MiB.
double peak_rss_mb();

/// Resets the peak to the resident set now (`5` into /proc/self/clear_refs),
/// so that the next peak_rss_mb() is the peak of what runs in between. False
/// where the kernel does not allow it.
bool reset_peak_rss();

}  // namespace dtensor::cli
