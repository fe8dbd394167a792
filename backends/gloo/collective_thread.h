// Why a Gloo group runs its collectives on a thread of its own.
//
// A Gloo collective blocks its caller in waits on buffers that Gloo creates
// and keeps to itself (the ring allreduce's scratch buffer, the barrier's).
// When a connection fails while a message is half read (the peer died in
// the middle of sending it, or abort() closed the connections), Gloo's TCP
// pair fails every pending operation but the one being read: the wait on
// that buffer goes on for the whole operation timeout. With four ranks
// killed mid-allreduce, one survivor in about twenty stayed blocked for the
// full DTENSOR_TIMEOUT although the fault monitor had named the dead rank
// within a second. Nothing outside Gloo can reach that buffer (point-to-point
// waits are on buffers we own, and abort() ends them directly).
//
// So the caller hands the call to the group's collective thread and waits on
// a condition of its own, which abort() ends. An abandoned call finishes at
// its own timeout on that thread; it must own everything it touches (the
// options, the tensors' storage, the context), because the caller's frame
// unwinds as soon as it throws.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "backends/gloo/call_name.h"

namespace dtensor::gloo_backend {

class CollectiveThread {
 public:
  CollectiveThread();
  /// The thread ends once its call (if any) has returned; it is never waited for.
  ~CollectiveThread();
  CollectiveThread(const CollectiveThread&) = delete;
  CollectiveThread& operator=(const CollectiveThread&) = delete;

  /// Runs `call` on the thread; returns when it has returned, rethrowing what
  /// it threw. When abort() comes first, waits `grace` for the call to end on
  /// its own (usually it does: its connections were closed), then throws
  /// CommError naming `op` and the abort's reason, leaving the call behind.
  void run(const CallName& op, std::function<void()> call,
           std::chrono::milliseconds grace = std::chrono::milliseconds(200));
  /// Ends the wait of a run() under way, and makes later runs throw at once.
  void abort(const std::string& reason);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive us
};

}  // namespace dtensor::gloo_backend
