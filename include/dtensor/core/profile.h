// Where this rank's time goes, call by call: the wall time inside each
// outermost communicating call (an operator's dispatch, its backward, a
// redistribute, full_tensor, a DeviceMesh's own collectives) and, of it, the
// time this rank stood blocked in communication (collectives, and waits on
// point-to-point messages, posting them included). A spatially parallel step is slower than the
// shard alone by its extra work and by its waits for the slower rank; the
// two columns tell them apart (docs/performance.md measured the U-Net step
// this way).
//
// Off by default: then a call costs one relaxed load more. DTENSOR_PROFILE=on
// turns it on at init_process_group and prints each rank's table to stderr
// at destroy_process_group (at exit, for a program that never calls it);
// set_operator_profiling() turns it on or off from code. Counts only calls
// made on a thread with no outer call open, as the desync check numbers them
// (dtensor/core/comm_scope.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor {

/// One row of a rank's profile: every outermost call of that name.
struct OperatorTime {
  std::string op;
  std::int64_t calls = 0;
  /// Wall time inside the calls.
  double seconds = 0;
  /// Of it, inside communication: collectives, posting messages and waiting
  /// for them (a rank ahead waits here for the others). In the row
  /// "(outside calls)": communication made outside any call (a ProcessGroup
  /// used directly), where `calls` is 0. Timed by the layer that watches
  /// for failed ranks (which a job without a fault monitor, backend mpi
  /// without a store, has too, without the watching).
  double comm_seconds = 0;
};

/// Turns timing on or off (what was counted stays until reset).
void set_operator_profiling(bool on);
bool operator_profiling();
/// This rank's rows since profiling began or the last reset, the most time
/// first (ties by name).
std::vector<OperatorTime> operator_profile();
void reset_operator_profile();
/// The rows as a text table: op, calls, ms, ms in communication and the
/// share of the total time; a last line with the totals.
std::string format_operator_profile(const std::vector<OperatorTime>& rows);

}  // namespace dtensor
