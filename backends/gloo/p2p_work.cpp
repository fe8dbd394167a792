#include "backends/gloo/p2p_work.h"

#include <fmt/format.h>
#include <gloo/transport/unbound_buffer.h>

#include "backends/gloo/gloo_errors.h"
#include "backends/gloo/gloo_process_group.h"

namespace dtensor::gloo_backend {

std::string CollectiveName::str() const {
  if (op)
    return fmt::format("{}({}, {} x {})", kind, reduce_op_name(*op), numel, dtype_name(dtype));
  return fmt::format("{}({} x {})", kind, numel, dtype_name(dtype));
}

std::string P2PName::str() const {
  if (collective.kind) return collective.str();
  std::string s = fmt::format("{} rank {}", is_send ? "send to" : "recv from", peer);
  if (world_rank != peer) s += fmt::format(" (world rank {})", world_rank);
  return s + fmt::format(" tag {}", tag);
}

P2PWork::P2PWork(std::shared_ptr<GlooProcessGroup> group, bool is_send, Tensor tensor,
                 std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, P2PName what)
    : TransferWork(std::move(group), what),
      is_send_(is_send),
      tensor_(std::move(tensor)),
      buffer_(std::move(buffer)) {}

P2PWork::~P2PWork() {
  // Dropped without a successful wait: the transfer may still be in flight.
  if (!finished() && buffer_) group_->park_unfinished(std::move(buffer_), std::move(tensor_));
}

void P2PWork::wait_transfer(std::chrono::milliseconds timeout) {
  // A group that failed since the caller checked has closed its connections:
  // nothing can write into the buffer any more, so we need not wait.
  if (!group_->begin_wait(buffer_.get(), is_send_)) group_->check_usable(what_);
  struct EndWait {
    GlooProcessGroup& group;
    ::gloo::transport::UnboundBuffer* buffer;
    ~EndWait() { group.end_wait(buffer); }
  } end_wait{*group_, buffer_.get()};
  translate_errors(what_, [&] {
    const bool completed = is_send_ ? buffer_->waitSend(timeout) : buffer_->waitRecv(timeout);
    if (!completed) group_->check_usable([&] { return what_.str() + " (aborted)"; });
    if (!completed) throw CommError("gloo", what_.str() + ": aborted");
  });
}

void P2PWork::finished_well() {
  if (!is_send_) group_->counters().bytes_received += tensor_.nbytes();
  // Nothing is pending on it any more: the next transfer on this memory reuses it.
  group_->buffer_pool().release(std::move(buffer_));
}

}  // namespace dtensor::gloo_backend
