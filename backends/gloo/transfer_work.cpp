#include "backends/gloo/transfer_work.h"

#include "backends/gloo/gloo_process_group.h"

namespace dtensor::gloo_backend {

void TransferWork::wait(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (finished_) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  if (timeout.count() < 0) timeout = group_->timeout();
  try {
    // A broken group has closed its connections: nothing will complete.
    group_->check_usable(what_);
    wait_transfer(timeout);
  } catch (const CommError& e) {
    finished_ = true;
    error_ = std::current_exception();
    group_->fail(e.what());
    throw;
  }
  finished_ = true;
  finished_well();
}

}  // namespace dtensor::gloo_backend
