// The latch every backend's point-to-point handle keeps around its wait: the
// transfer is waited for once, and its outcome is the answer of every later
// wait() on the handle, as c10d's Work does (a failed wait keeps failing with
// the same error; a finished one returns at once).
#pragma once

#include <exception>
#include <mutex>

#include "dtensor/core/errors.h"

namespace dtensor::detail {

class WaitOnce {
 public:
  /// The first call runs `wait()`. When it throws CommError (a timeout, a
  /// peer gone), `failed(error)` runs once with the error's message (the
  /// backend breaks its group there) and the error is kept; every call after
  /// the first rethrows it, or returns at once after a success. `done()`
  /// runs once, after a successful wait.
  template <typename Wait, typename Failed, typename Done>
  void run(Wait&& wait, Failed&& failed, Done&& done) {
    std::lock_guard lock(mutex_);
    if (finished_) {
      if (error_) std::rethrow_exception(error_);
      return;
    }
    try {
      wait();
    } catch (const CommError& e) {
      finished_ = true;
      error_ = std::current_exception();
      failed(e);
      throw;
    }
    finished_ = true;
    done();
  }

  /// Whether the wait has run (successfully or not).
  bool finished() const { return finished_; }

 private:
  std::mutex mutex_;
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace dtensor::detail
