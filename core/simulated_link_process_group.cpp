#include "core/detail/simulated_link_process_group.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include <fmt/format.h>

#include "core/detail/direct_collectives.h"
#include "core/detail/helper_thread.h"
#include "core/detail/thread_name.h"
#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

constexpr const char* kComponent = "sim_link";
// Longest delay one message or collective is given: keeps the conversion to
// clock ticks finite whatever the bandwidth (a 1e-300 Gbit/s link).
constexpr double kMaxDelaySeconds = 1e6;

SimClock::duration seconds(double s) {
  return std::chrono::duration_cast<SimClock::duration>(
      std::chrono::duration<double>(std::clamp(s, 0.0, kMaxDelaySeconds)));
}

std::uint64_t nbytes(const Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

// Rounds of a binomial tree (or a dissemination barrier) over `p` ranks.
int tree_rounds(int p) {
  int rounds = 0;
  for (int reach = 1; reach < p; reach *= 2)
    ++rounds;
  return rounds;
}

}  // namespace

// ---- the link clocks ----

SimClock::duration SimulatedLinks::transfer_time(std::uint64_t bytes) const {
  if (!link_.gbit) return SimClock::duration::zero();
  return seconds(static_cast<double>(bytes) * 8.0 / (*link_.gbit * 1e9));
}

SimClock::duration SimulatedLinks::latency() const {
  return seconds(link_.latency_us * 1e-6);
}

SimClock::time_point SimulatedLinks::book(int peer, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  SimClock::time_point& free_at = free_at_[peer];
  const SimClock::time_point depart = std::max(SimClock::now(), free_at);
  free_at = depart + transfer_time(bytes);
  return free_at + latency();
}

// ---- a message on the link ----

struct SimulatedLinkProcessGroup::Message {
  Message(const Tensor& t, int to, int with_tag)
      : tensor(t),
        dst(to),
        tag(with_tag),
        what(fmt::format("send to rank {} tag {}", to, with_tag)) {}

  /// Handed to the backend (`work`) or failed before (`error`).
  void finish(std::shared_ptr<Work> work, std::exception_ptr err) {
    {
      std::lock_guard lock(mutex);
      inner = std::move(work);
      error = std::move(err);
      handed = true;
    }
    cv.notify_all();
  }

  const Tensor tensor;  // keeps the buffer alive until the backend has it
  const int dst, tag;
  const std::string what;
  std::mutex mutex;
  std::condition_variable cv;
  bool handed = false;
  std::shared_ptr<Work> inner;
  std::exception_ptr error;
};

namespace {

// A send still on the simulated link: wait() waits for the hand-over, then
// for the backend's send, within one timeout.
class DelayedSendWork final : public Work {
 public:
  DelayedSendWork(std::shared_ptr<SimulatedLinkProcessGroup::Message> m,
                  std::chrono::milliseconds default_timeout)
      : m_(std::move(m)), default_timeout_(default_timeout) {}

  void wait(std::chrono::milliseconds timeout) override {
    const auto limit = timeout.count() < 0 ? default_timeout_ : timeout;
    const auto deadline = SimClock::now() + limit;
    std::shared_ptr<Work> inner;
    {
      std::unique_lock lock(m_->mutex);
      if (!m_->cv.wait_until(lock, deadline, [&] { return m_->handed; }))
        throw TimeoutError(
            kComponent, fmt::format("wait({}): still on the simulated link after {} ms", m_->what,
                                    limit.count()));
      if (m_->error) std::rethrow_exception(m_->error);
      inner = m_->inner;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SimClock::now());
    inner->wait(std::max(left, std::chrono::milliseconds(1)));
  }

 private:
  std::shared_ptr<SimulatedLinkProcessGroup::Message> m_;
  std::chrono::milliseconds default_timeout_;
};

}  // namespace

// ---- the group ----

std::shared_ptr<ProcessGroup> SimulatedLinkProcessGroup::wrap(std::shared_ptr<ProcessGroup> inner,
                                                              const Config::SimLink& link) {
  if (!inner) return nullptr;
  return std::shared_ptr<ProcessGroup>(
      new SimulatedLinkProcessGroup(std::move(inner), std::make_shared<SimulatedLinks>(link)));
}

SimulatedLinkProcessGroup::SimulatedLinkProcessGroup(std::shared_ptr<ProcessGroup> inner,
                                                     std::shared_ptr<SimulatedLinks> links)
    : ForwardingProcessGroup(std::move(inner)), links_(std::move(links)) {}

SimulatedLinkProcessGroup::~SimulatedLinkProcessGroup() {
  stop("the group was destroyed before the message left the simulated link");
}

std::shared_ptr<ProcessGroup> SimulatedLinkProcessGroup::wrap_subgroup(
    std::shared_ptr<ProcessGroup> sub) const {
  if (!sub) return nullptr;
  return std::shared_ptr<ProcessGroup>(new SimulatedLinkProcessGroup(std::move(sub), links_));
}

void SimulatedLinkProcessGroup::stop(const std::string& why) {
  std::multimap<SimClock::time_point, std::shared_ptr<Message>> dropped;
  {
    std::lock_guard lock(mutex_);
    if (stopped_.empty()) stopped_ = why;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& entry : dropped) {
    Message& m = *entry.second;
    m.finish(nullptr,
             std::make_exception_ptr(CommError(kComponent, fmt::format("{}: {}", m.what, why))));
  }
  // Never joined from the delay thread itself (an abort from inside a send).
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void SimulatedLinkProcessGroup::abort(const std::string& reason) {
  stop(reason);
  inner_->abort(reason);
}

void SimulatedLinkProcessGroup::deliver(Message& m) {
  std::shared_ptr<Work> work;
  std::exception_ptr error;
  try {
    std::lock_guard lock(post_mutex_);
    work = inner_->isend(m.tensor, m.dst, m.tag);
  } catch (...) {
    error = std::current_exception();
  }
  m.finish(std::move(work), std::move(error));
}

void SimulatedLinkProcessGroup::delay_loop() {
  // It posts the rank's sends when they are due: it must not hand its core
  // to the computation before each (core/detail/helper_thread.h).
  mark_helper_thread();
  std::unique_lock lock(mutex_);
  while (stopped_.empty()) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const SimClock::time_point due = queue_.begin()->first;
    if (SimClock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    std::shared_ptr<Message> m = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    lock.unlock();
    deliver(*m);
    lock.lock();
  }
}

std::shared_ptr<Work> SimulatedLinkProcessGroup::post_send(const Tensor& t, int dst, int tag) {
  auto m = std::make_shared<Message>(t, dst, tag);
  const SimClock::time_point due = links_->book(global_ranks()[dst], nbytes(t));
  {
    std::lock_guard lock(mutex_);
    if (stopped_.empty()) {
      if (!thread_.joinable())
        thread_ = std::thread([this] {
          detail::name_this_thread("dtensor-simlink");
          delay_loop();
        });
      // The delay thread sleeps until the earliest message is due, so only a
      // message that is now the earliest changes when it must wake: the rest
      // of a burst costs it no wake-up, and the rank's core no switch to it.
      const auto at = queue_.emplace(due, m);
      if (at == queue_.begin()) cv_.notify_all();
      return std::make_shared<DelayedSendWork>(std::move(m), timeout());
    }
  }
  // Aborted: the backend's group answers (it fails promptly).
  std::lock_guard lock(post_mutex_);
  return inner_->isend(t, dst, tag);
}

std::shared_ptr<Work> SimulatedLinkProcessGroup::isend(const Tensor& t, int dst, int tag) {
  return post_send(t, dst, tag);
}

std::shared_ptr<Work> SimulatedLinkProcessGroup::irecv(const Tensor& t, int src, int tag) {
  std::lock_guard lock(post_mutex_);
  return inner_->irecv(t, src, tag);
}

std::vector<std::shared_ptr<Work>> SimulatedLinkProcessGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  std::vector<std::shared_ptr<Work>> works(ops.size());
  std::vector<P2POp> recvs;
  std::vector<std::size_t> recv_index;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == P2POp::Kind::Recv) {
      recvs.push_back(ops[i]);
      recv_index.push_back(i);
    }
  // Receives first, as the batch contract says; the sends follow on the link.
  if (!recvs.empty()) {
    std::vector<std::shared_ptr<Work>> posted;
    {
      std::lock_guard lock(post_mutex_);
      posted = inner_->batch_isend_irecv(recvs);
    }
    for (std::size_t k = 0; k < posted.size() && k < recv_index.size(); ++k)
      works[recv_index[k]] = std::move(posted[k]);
  }
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == P2POp::Kind::Send)
      works[i] = post_send(ops[i].tensor, ops[i].peer, ops[i].tag);
  return works;
}

// ---- collectives: the modelled cost first, then the real call ----
//
// With P ranks, latency L, bandwidth W and T(b) = b / W (0 when W is
// unlimited), the costs of the algorithms the CPU group runs (small
// allreduces and allgathers are direct, core/detail/direct_collectives.h):
//   allreduce (ring):        2(P-1) L + T(2(P-1)/P * bytes)
//   allreduce (direct):      L + T((P-1) * bytes)
//   allreduce (halving and doubling, P' the largest power of two <= P,
//              f = 1 when P' < P, else 0):
//                            (2 log2 P' + 2f) L + T((2(P'-1)/P' + 2f) * bytes)
//   broadcast (binomial):    ceil(log2 P) (L + T(bytes))
//   allgather (ring):        (P-1) L + T((P-1)/P * bytes of out)
//   allgather (Bruck's):     ceil(log2 P) L + T((P-1)/P * bytes of out)
//   allgather (direct):      L + T((P-1)/P * bytes of out)
//   reduce_scatter (ring):   (P-1) L + T((P-1)/P * bytes of in)
//   all_to_all (pairwise):   (P-1) L + T(max(bytes sent, bytes received))
//   barrier (dissemination): ceil(log2 P) L
// A group of one rank costs nothing.

void SimulatedLinkProcessGroup::sleep_for(SimClock::duration d) {
  if (size() <= 1 || d <= SimClock::duration::zero()) return;
  std::unique_lock lock(mutex_);
  const SimClock::time_point until = SimClock::now() + d;
  cv_.wait_until(lock, until, [&] { return !stopped_.empty() || SimClock::now() >= until; });
}

void SimulatedLinkProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  const int p = size();
  switch (allreduce_algorithm(nbytes(t), p)) {
    case AllreduceAlgorithm::Direct:
      sleep_for(links_->latency() +
                links_->transfer_time(static_cast<std::uint64_t>(p - 1) * nbytes(t)));
      break;
    case AllreduceAlgorithm::HalvingDoubling:
      sleep_for(
          halving_doubling_rounds(p) * links_->latency() +
          links_->transfer_time(static_cast<std::uint64_t>(halving_doubling_share(p) * nbytes(t))));
      break;
    case AllreduceAlgorithm::Ring: {
      const double share = 2.0 * (p - 1) / p;
      sleep_for(2 * (p - 1) * links_->latency() +
                links_->transfer_time(static_cast<std::uint64_t>(share * nbytes(t))));
      break;
    }
  }
  inner_->allreduce(t, op);
}

void SimulatedLinkProcessGroup::broadcast(Tensor& t, int root) {
  sleep_for(tree_rounds(size()) * (links_->latency() + links_->transfer_time(nbytes(t))));
  inner_->broadcast(t, root);
}

void SimulatedLinkProcessGroup::allgather(const Tensor& in, Tensor& out,
                                          const std::vector<std::int64_t>& counts) {
  const int p = size();
  const double share = p > 0 ? static_cast<double>(p - 1) / p : 0.0;
  const AllgatherAlgorithm algorithm = allgather_algorithm(nbytes(out), p);
  const int rounds = algorithm == AllgatherAlgorithm::Direct  ? 1
                     : algorithm == AllgatherAlgorithm::Bruck ? bruck_rounds(p)
                                                              : p - 1;
  sleep_for(rounds * links_->latency() +
            links_->transfer_time(static_cast<std::uint64_t>(share * nbytes(out))));
  inner_->allgather(in, out, counts);
}

void SimulatedLinkProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                               const std::vector<std::int64_t>& counts,
                                               ReduceOp op) {
  const int p = size();
  const double share = p > 0 ? static_cast<double>(p - 1) / p : 0.0;
  sleep_for((p - 1) * links_->latency() +
            links_->transfer_time(static_cast<std::uint64_t>(share * nbytes(in))));
  inner_->reduce_scatter(in, out, counts, op);
}

void SimulatedLinkProcessGroup::all_to_all(const Tensor& in,
                                           const std::vector<std::int64_t>& send_counts,
                                           Tensor& out,
                                           const std::vector<std::int64_t>& recv_counts) {
  const int r = rank();
  const std::uint64_t elem = in.defined() ? dtype_size(in.dtype()) : 0;
  const auto own = [&](const std::vector<std::int64_t>& counts) -> std::uint64_t {
    return r < static_cast<int>(counts.size()) ? static_cast<std::uint64_t>(counts[r]) * elem : 0;
  };
  const std::uint64_t sent = nbytes(in) - std::min(nbytes(in), own(send_counts));
  const std::uint64_t received = nbytes(out) - std::min(nbytes(out), own(recv_counts));
  sleep_for((size() - 1) * links_->latency() + links_->transfer_time(std::max(sent, received)));
  inner_->all_to_all(in, send_counts, out, recv_counts);
}

void SimulatedLinkProcessGroup::barrier() {
  sleep_for(tree_rounds(size()) * links_->latency());
  inner_->barrier();
}

std::shared_ptr<ProcessGroup> SimulatedLinkProcessGroup::new_subgroup(
    const std::vector<int>& ranks) {
  return wrap_subgroup(inner_->new_subgroup(ranks));
}

std::shared_ptr<ProcessGroup> SimulatedLinkProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  return wrap_subgroup(inner_->split_groups(groups));
}

}  // namespace dtensor::detail
