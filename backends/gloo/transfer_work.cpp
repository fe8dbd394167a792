#include "backends/gloo/transfer_work.h"

#include "backends/gloo/gloo_process_group.h"

namespace dtensor::gloo_backend {

void TransferWork::wait(std::chrono::milliseconds timeout) {
  once_.run(
      [&] {
        // A broken group has closed its connections: nothing will complete.
        group_->check_usable(what_);
        wait_transfer(timeout.count() < 0 ? group_->timeout() : timeout);
      },
      [&](const CommError& e) { group_->fail(e.what()); }, [&] { finished_well(); });
}

}  // namespace dtensor::gloo_backend
