// Point-to-point messages a rank sends to itself, for every backend (the
// validating layer, core/detail/validating_process_group.h, routes them here).
// They never reach the backend: a send and a receive with the same tag are
// matched in posting order and completed by a local copy. As with remote peers, dropping a
// handle does not cancel its operation: it stays posted (and keeps its
// tensor alive) until matched.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dtensor/core/process_group.h"

namespace dtensor::detail {

class SelfMailbox {
 public:
  /// `default_timeout` bounds a wait() called with a negative timeout.
  /// `backend` names the group's backend in errors, as its own messages do.
  SelfMailbox(std::string backend, std::chrono::milliseconds default_timeout)
      : backend_(std::move(backend)), timeout_(default_timeout) {}

  std::shared_ptr<Work> post_send(const Tensor& t, int self_rank, int tag);
  std::shared_ptr<Work> post_recv(const Tensor& t, int self_rank, int tag);

 private:
  struct State;  // one posted operation
  class SelfWork;
  std::shared_ptr<Work> post(bool is_send, const Tensor& t, int self_rank, int tag);

  std::string backend_;
  std::chrono::milliseconds timeout_;
  // Shared with the Work handles so that they stay valid after the group is gone.
  struct Shared {
    std::mutex m;
    std::condition_variable cv;
    std::map<int, std::deque<std::shared_ptr<State>>> sends, recvs;  // unmatched, by tag
  };
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

}  // namespace dtensor::detail
