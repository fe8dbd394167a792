// The handle of one point-to-point transfer with a remote rank: a Gloo
// unbound buffer over the tensor's memory, waited on with a timeout.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "backends/gloo/call_name.h"
#include "backends/gloo/transfer_work.h"
#include "dtensor/core/process_group.h"

namespace gloo::transport {
class UnboundBuffer;
}

namespace dtensor::gloo_backend {

class P2PWork : public TransferWork {
 public:
  P2PWork(std::shared_ptr<GlooProcessGroup> group, bool is_send, Tensor tensor,
          std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, P2PName what);
  ~P2PWork() override;

 private:
  void wait_transfer(std::chrono::milliseconds timeout) override;
  void finished_well() override;

  const bool is_send_;
  Tensor tensor_;  // keeps the memory Gloo reads or writes alive
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer_;
};

}  // namespace dtensor::gloo_backend
