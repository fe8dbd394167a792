// Which communicating call this process is in: every public entry point that
// talks to other ranks (dispatch, redistribute, full_tensor, reduce_partials,
// DeviceMesh, the world group's own operations) opens a CommScope. Only the
// outermost scope of a thread counts, so "convolution" is one call whatever
// it does inside.
// The n-th outermost call is call n on every rank that makes the same calls,
// which is what the desync check compares (core/detail/fault_monitor.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtensor::detail {

class CommScope {
 public:
  /// `op` must outlive the scope (a literal, or the caller's string).
  explicit CommScope(std::string_view op);
  ~CommScope();
  CommScope(const CommScope&) = delete;
  CommScope& operator=(const CommScope&) = delete;

 private:
  bool outermost_;
  // The operator profile's (dtensor/core/profile.h): when the call began
  // (-1: not timed) and this thread's communication time then.
  std::string_view op_;
  std::int64_t start_ns_ = -1;
  std::int64_t comm_before_ns_ = 0;
};

/// Marks the thread's call as blocked on another rank: waiting for a
/// message or inside a collective. Opened where the monitored group waits
/// (core/monitored_process_group.cpp); counts only on a thread inside a
/// call. The desync check compares calls only while every rank is blocked:
/// a rank computing inside a long call is slow, not diverged.
class CommWaitScope {
 public:
  CommWaitScope();
  ~CommWaitScope();
  CommWaitScope(const CommWaitScope&) = delete;
  CommWaitScope& operator=(const CommWaitScope&) = delete;

 private:
  bool counted_;  // opened inside a call
};

struct CurrentCall {
  std::string op{};
  std::uint64_t call = 0;
  std::chrono::steady_clock::time_point since{};
  /// Since when the call has been blocked on another rank without a break
  /// (CommWaitScope); none: it is computing now.
  std::optional<std::chrono::steady_clock::time_point> blocked_since{};
};

/// The outermost call in progress, if any (read by the monitor thread).
std::optional<CurrentCall> current_call();
/// The number of the outermost call in progress (or of the last one): cheap,
/// for the flight recorder.
std::uint64_t current_call_number();
/// The number the next outermost call will get.
std::uint64_t next_call_index();
/// Starts numbering again (a new world: every rank starts from 0).
void reset_call_numbers();

}  // namespace dtensor::detail
