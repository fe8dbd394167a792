// What every point-to-point handle of the Gloo group does around its own
// wait (over a TCP pair, p2p_work.h, or through shared memory,
// shm_channel.h): it waits once (core/detail/wait_once.h); a failure (peer
// gone, timeout) breaks the group and is rethrown by every later wait() on
// the handle.
#pragma once

#include <chrono>
#include <memory>

#include "backends/gloo/call_name.h"
#include "core/detail/wait_once.h"
#include "dtensor/core/process_group.h"

namespace dtensor::gloo_backend {

class GlooProcessGroup;

class TransferWork : public Work {
 public:
  /// Negative timeout: the group's.
  void wait(std::chrono::milliseconds timeout) final;

 protected:
  TransferWork(std::shared_ptr<GlooProcessGroup> group, P2PName what)
      : group_(std::move(group)), what_(what) {}
  /// Waits for the transfer itself; CommError (TimeoutError) on failure.
  virtual void wait_transfer(std::chrono::milliseconds timeout) = 0;
  /// After a successful wait, once.
  virtual void finished_well() {}
  bool finished() const { return once_.finished(); }

  std::shared_ptr<GlooProcessGroup> group_;  // keeps the connections alive
  const P2PName what_;                       // "send to rank 2 tag 7", for messages

 private:
  detail::WaitOnce once_;
};

}  // namespace dtensor::gloo_backend
