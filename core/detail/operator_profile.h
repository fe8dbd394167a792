// The profiler's hooks (dtensor/core/profile.h): CommScope times the
// outermost calls, MonitoredProcessGroup the communication inside them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace dtensor::detail {

extern std::atomic<bool> g_operator_profiling;

inline bool operator_profiling_on() {
  return g_operator_profiling.load(std::memory_order_relaxed);
}
inline std::int64_t profile_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// An outermost call opened on this thread: returns this thread's
/// communication time so far, for call_ended.
std::int64_t call_began();
/// The call `op` that began at `start_ns` (with `comm_before_ns` from
/// call_began) ended.
void call_ended(std::string_view op, std::int64_t start_ns, std::int64_t comm_before_ns);
/// This thread spent `ns` in communication (counted in its open call, or
/// under "(outside calls)").
void add_comm_time(std::int64_t ns);

}  // namespace dtensor::detail
