#include "backends/gloo/collective_thread.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/detail/thread_name.h"
#include "dtensor/core/errors.h"

namespace dtensor::gloo_backend {

struct CollectiveThread::State {
  std::mutex mutex;
  std::condition_variable wake;      // the thread: a call to run, or stop
  std::condition_variable finished;  // the caller: the call returned, or abort
  std::function<void()> call;        // set while a call waits for the thread
  bool busy = false;                 // a call is queued or running
  std::exception_ptr error;          // what the last call threw
  std::optional<std::string> aborted;
  bool stop = false;
  bool started = false;

  void serve() {
    std::unique_lock lock(mutex);
    while (true) {
      wake.wait(lock, [&] { return stop || call != nullptr; });
      if (!call) return;  // stopped while idle
      std::function<void()> mine = std::exchange(call, nullptr);
      lock.unlock();
      std::exception_ptr thrown;
      try {
        mine();
      } catch (...) {
        thrown = std::current_exception();
      }
      mine = nullptr;  // releases what the call owned before anyone is told
      lock.lock();
      error = thrown;
      busy = false;
      finished.notify_all();
    }
  }
};

CollectiveThread::CollectiveThread() : state_(std::make_shared<State>()) {}

CollectiveThread::~CollectiveThread() {
  std::lock_guard lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
}

void CollectiveThread::run(const CallName& op, std::function<void()> call,
                           std::chrono::milliseconds grace) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.aborted) throw CommError("gloo", op.str() + ": the group was aborted: " + *s.aborted);
  if (!s.started) {
    // Detached and owning the state: an abandoned call may outlast the group.
    std::thread([state = state_] {
      detail::name_this_thread("dtensor-collect");
      state->serve();
    }).detach();
    s.started = true;
  }
  s.call = std::move(call);
  s.busy = true;
  s.error = nullptr;
  s.wake.notify_one();
  s.finished.wait(lock, [&] { return !s.busy || s.aborted; });
  if (s.busy) s.finished.wait_for(lock, grace, [&] { return !s.busy; });
  if (s.busy)
    throw CommError("gloo", op.str() +
                                ": abandoned (it would wait out its timeout) after the group "
                                "was aborted: " +
                                *s.aborted);
  if (s.error) std::rethrow_exception(s.error);
}

void CollectiveThread::abort(const std::string& reason) {
  std::lock_guard lock(state_->mutex);
  if (!state_->aborted) state_->aborted = reason;
  state_->finished.notify_all();
}

}  // namespace dtensor::gloo_backend
