// The NCCL backend's watchdog: every wait on a non-blocking communicator
// (initialisation, enqueueing, completion) polls instead of blocking, and past
// the deadline aborts the communicator and raises TimeoutError, so a dead or
// stuck peer becomes an error on every rank instead of a hang. No NCCL types
// here: the loop is unit-tested with fake polls.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace dtensor::nccl_backend {

enum class PollStatus { Pending, Done, Failed };
struct Poll {
  PollStatus status = PollStatus::Pending;
  std::string error;  // for Failed
};

/// Calls `poll` (backing off from tens of microseconds to a millisecond) until
/// it reports Done. Failed: calls `abort` and throws CommError(what: error).
/// Past `timeout`: calls `abort` and throws TimeoutError naming `what`.
void watch(std::string_view what, const std::function<Poll()>& poll,
           const std::function<void()>& abort, std::chrono::milliseconds timeout);

}  // namespace dtensor::nccl_backend
