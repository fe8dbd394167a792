#include "core/detail/self_mailbox.h"

#include <cstring>

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor::detail {

namespace {

// A message is bytes, as over a wire. Host memory is copied as such; device
// memory through the device's copy, which needs one dtype on both sides.
void copy_message(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
    return;
  }
  if (dst.dtype() != src.dtype())
    throw NotSupported("p2p", fmt::format("a message to itself from {} {} into {} {}: on a device "
                                          "both sides need the same dtype",
                                          src.device().str(), dtype_name(src.dtype()),
                                          dst.device().str(), dtype_name(dst.dtype())));
  dst.view({dst.numel()}).copy_(src.view({src.numel()}));
}

}  // namespace

struct SelfMailbox::State {
  Tensor tensor;
  bool done = false;
  std::exception_ptr error;
};

class SelfMailbox::SelfWork : public Work {
 public:
  SelfWork(std::shared_ptr<Shared> shared, std::shared_ptr<State> state, std::string backend,
           std::string what, std::chrono::milliseconds default_timeout)
      : shared_(std::move(shared)),
        state_(std::move(state)),
        backend_(std::move(backend)),
        what_(std::move(what)),
        default_timeout_(default_timeout) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (timeout.count() < 0) timeout = default_timeout_;
    std::unique_lock lock(shared_->m);
    // Another thread may post the matching operation while we wait.
    if (!shared_->cv.wait_for(lock, timeout, [&] { return state_->done; }))
      throw TimeoutError(
          backend_,
          fmt::format("{}: timed out after {} ms: the matching {} was never "
                      "posted on this rank",
                      what_, timeout.count(), what_.rfind("send", 0) == 0 ? "irecv" : "isend"));
    if (state_->error) std::rethrow_exception(state_->error);
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<State> state_;
  std::string backend_;
  std::string what_;
  std::chrono::milliseconds default_timeout_;
};

std::shared_ptr<Work> SelfMailbox::post_send(const Tensor& t, int self_rank, int tag) {
  return post(true, t, self_rank, tag);
}

std::shared_ptr<Work> SelfMailbox::post_recv(const Tensor& t, int self_rank, int tag) {
  return post(false, t, self_rank, tag);
}

std::shared_ptr<Work> SelfMailbox::post(bool is_send, const Tensor& t, int self_rank, int tag) {
  auto state = std::make_shared<State>();
  state->tensor = t;
  const std::string what =
      fmt::format("{} rank {} (itself) tag {}", is_send ? "send to" : "recv from", self_rank, tag);
  {
    std::lock_guard lock(shared_->m);
    auto& mine = is_send ? shared_->sends[tag] : shared_->recvs[tag];
    auto& theirs = is_send ? shared_->recvs[tag] : shared_->sends[tag];
    if (theirs.empty()) {
      mine.push_back(state);
    } else {
      std::shared_ptr<State> other = theirs.front();
      theirs.pop_front();
      const Tensor& src = is_send ? state->tensor : other->tensor;
      const Tensor& dst = is_send ? other->tensor : state->tensor;
      if (src.nbytes() != dst.nbytes()) {
        // Both sides learn of the mismatch, as they would from a remote peer.
        auto err = std::make_exception_ptr(CommError(
            backend_, fmt::format("send to rank {} (itself) tag {}: {} bytes sent but the receive "
                                  "expects {}",
                                  self_rank, tag, src.nbytes(), dst.nbytes())));
        state->error = other->error = err;
      } else if (src.nbytes() > 0) {
        try {
          copy_message(dst, src);
        } catch (...) {
          state->error = other->error = std::current_exception();
        }
      }
      state->done = other->done = true;
      shared_->cv.notify_all();
    }
  }
  return std::make_shared<SelfWork>(shared_, state, backend_, what, timeout_);
}

}  // namespace dtensor::detail
