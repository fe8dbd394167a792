// The handle of one point-to-point transfer with a remote rank: a Gloo
// unbound buffer over the tensor's memory, waited on with a timeout.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "backends/gloo/call_name.h"
#include "dtensor/core/process_group.h"

namespace gloo::transport {
class UnboundBuffer;
}

namespace dtensor::gloo_backend {

class GlooProcessGroup;

class P2PWork : public Work {
 public:
  P2PWork(std::shared_ptr<GlooProcessGroup> group, bool is_send, Tensor tensor,
          std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, P2PName what);
  ~P2PWork() override;

  /// Negative timeout: the group's. A failure (peer gone, timeout) breaks the
  /// group and is rethrown by every later wait() on this handle.
  void wait(std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<GlooProcessGroup> group_;  // keeps the connections alive
  const bool is_send_;
  Tensor tensor_;  // keeps the memory Gloo reads or writes alive
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer_;
  const P2PName what_;  // "send to rank 2 tag 7", for messages

  std::mutex mutex_;
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace dtensor::gloo_backend
