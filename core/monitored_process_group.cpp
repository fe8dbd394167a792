#include "core/detail/monitored_process_group.h"

#include <optional>

#include <fmt/format.h>

#include "core/detail/flight_recorder.h"
#include "core/detail/operator_profile.h"
#include "dtensor/core/comm_scope.h"
#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

using Rec = FlightRecorder;

// How long a rank whose operation failed waits for another rank's published
// cause before blaming itself: a peer publishes before closing its
// connections, but the closed connection may arrive first, and a dead peer
// is published by its watcher within a monitor tick or two.
constexpr std::chrono::milliseconds kCauseGrace{500};

std::string group_name(const ProcessGroup& g, bool is_world) {
  if (is_world) return "world";
  std::string s = "g[";
  for (std::size_t i = 0; i < g.global_ranks().size(); ++i)
    s += (i ? "," : "") + std::to_string(g.global_ranks()[i]);
  return s + "]";
}

class MonitoredWork final : public Work {
 public:
  MonitoredWork(std::shared_ptr<Work> inner, std::shared_ptr<MonitoredProcessGroup> group,
                std::uint64_t id, MonitoredProcessGroup::MessageWait what)
      : inner_(std::move(inner)), group_(std::move(group)), id_(id), what_(what) {}
  void wait(std::chrono::milliseconds timeout) override {
    const std::int64_t start = operator_profiling_on() ? profile_clock_ns() : -1;
    try {
      group_->throw_if_failed(what_);
      const CommWaitScope blocked;
      inner_->wait(timeout);
    } catch (...) {
      group_->on_failure(what_.str(), id_);
    }
    Rec::finish(id_, Rec::State::Completed);
    if (start >= 0) add_comm_time(profile_clock_ns() - start);
  }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<MonitoredProcessGroup> group_;
  std::uint64_t id_;
  MonitoredProcessGroup::MessageWait what_;
};

}  // namespace

std::shared_ptr<MonitoredProcessGroup> MonitoredProcessGroup::wrap(
    std::shared_ptr<ProcessGroup> inner, std::shared_ptr<FaultMonitor> monitor, bool is_world) {
  if (!inner) return nullptr;
  if (monitor) monitor->watch(inner);
  return std::shared_ptr<MonitoredProcessGroup>(
      new MonitoredProcessGroup(std::move(inner), std::move(monitor), is_world));
}

MonitoredProcessGroup::MonitoredProcessGroup(std::shared_ptr<ProcessGroup> inner,
                                             std::shared_ptr<FaultMonitor> monitor, bool is_world)
    : ForwardingProcessGroup(std::move(inner)),
      monitor_(std::move(monitor)),
      is_world_(is_world),
      name_(group_name(*inner_, is_world)) {}

void MonitoredProcessGroup::throw_if_failed(std::string_view op) const {
  if (!monitor_) return;
  if (auto cause = monitor_->remote_failure())
    throw CommError("monitor", fmt::format("{}: {}", op, *cause));
}

void MonitoredProcessGroup::throw_if_failed(const MessageWait& wait) const {
  if (!monitor_) return;
  if (auto cause = monitor_->remote_failure())
    throw CommError("monitor", fmt::format("{}: {}", wait.str(), *cause));
}

std::string MonitoredProcessGroup::MessageWait::str() const {
  return fmt::format("wait({} rank {} tag {})", send ? "send to" : "recv from", peer, tag);
}

std::uint64_t MonitoredProcessGroup::record_start(std::string_view op, int peer,
                                                  std::uint64_t bytes) {
  return Rec::start(op, name_, peer, bytes, current_call_number());
}

void MonitoredProcessGroup::on_failure(std::string_view op, std::uint64_t id) {
  try {
    throw;
  } catch (const InvalidArgument&) {
    // Bad input is raised alike on every rank before anything moves: the
    // group stays usable and nobody else needs telling.
    Rec::finish(id, Rec::State::Rejected);
    throw;
  } catch (const NotSupported&) {
    Rec::finish(id, Rec::State::Rejected);  // likewise
    throw;
  } catch (const TimeoutError& e) {
    // This rank waited out its own timeout: its error stands on its own
    // (the type is kept), unless the job's cause is already known.
    Rec::finish(id, Rec::State::Failed);
    if (!monitor_) throw;
    if (auto cause = monitor_->remote_failure())
      throw TimeoutError("monitor", fmt::format("{}: {}", op, *cause));
    monitor_->fail_local(e.what());
    throw;
  } catch (const std::exception& e) {
    // A broken connection is usually the news of another rank's failure,
    // told by the transport a moment before the monitor tells the cause.
    Rec::finish(id, Rec::State::Failed);
    if (!monitor_) throw;
    if (auto cause = monitor_->remote_failure_within(kCauseGrace))
      throw CommError("monitor", fmt::format("{}: {}", op, *cause));
    monitor_->fail_local(e.what());
    throw;
  }
}

template <typename Fn>
void MonitoredProcessGroup::run(Kind kind, std::string_view op, int peer, std::uint64_t bytes,
                                Fn&& fn) {
  // Only the world's own collectives are calls of their own: a subgroup's
  // run inside a public call (a mesh's, dispatch's) that already counts, and
  // point-to-point posts differ between ranks by nature (rank 0 sends to two
  // ranks, each of them receives once).
  std::optional<CommScope> scope;
  if (is_world_ && kind == Kind::Collective) scope.emplace(op);
  throw_if_failed(op);
  const std::uint64_t id = record_start(op, peer, bytes);
  const std::int64_t start = operator_profiling_on() ? profile_clock_ns() : -1;
  try {
    const CommWaitScope blocked;
    fn();
  } catch (...) {
    on_failure(op, id);
  }
  Rec::finish(id, Rec::State::Completed);
  if (start >= 0) add_comm_time(profile_clock_ns() - start);
}

std::shared_ptr<Work> MonitoredProcessGroup::wrap_work(std::shared_ptr<Work> inner, const Tensor& t,
                                                       MessageWait wait) {
  if (!inner) return inner;
  const std::uint64_t id =
      record_start(wait.send ? "send" : "recv", wait.peer, t.defined() ? t.nbytes() : 0);
  return std::make_shared<MonitoredWork>(std::move(inner), shared_from_this(), id, wait);
}

std::shared_ptr<Work> MonitoredProcessGroup::isend(const Tensor& t, int dst, int tag) {
  std::shared_ptr<Work> w;
  const std::uint64_t bytes = t.defined() ? t.nbytes() : 0;
  run(Kind::PointToPoint, "isend", dst, bytes, [&] { w = inner_->isend(t, dst, tag); });
  return wrap_work(std::move(w), t, {true, dst, tag});
}

std::shared_ptr<Work> MonitoredProcessGroup::irecv(const Tensor& t, int src, int tag) {
  std::shared_ptr<Work> w;
  const std::uint64_t bytes = t.defined() ? t.nbytes() : 0;
  run(Kind::PointToPoint, "irecv", src, bytes, [&] { w = inner_->irecv(t, src, tag); });
  return wrap_work(std::move(w), t, {false, src, tag});
}

std::vector<std::shared_ptr<Work>> MonitoredProcessGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  std::vector<std::shared_ptr<Work>> works;
  std::uint64_t bytes = 0;
  for (const P2POp& op : ops)
    bytes += op.tensor.defined() ? op.tensor.nbytes() : 0;
  run(Kind::PointToPoint, "batch_isend_irecv", -1, bytes,
      [&] { works = inner_->batch_isend_irecv(ops); });
  for (std::size_t i = 0; i < works.size() && i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    works[i] =
        wrap_work(std::move(works[i]), op.tensor, {op.kind == P2POp::Kind::Send, op.peer, op.tag});
  }
  return works;
}

void MonitoredProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  run(Kind::Collective, "allreduce", -1, t.defined() ? t.nbytes() : 0,
      [&] { inner_->allreduce(t, op); });
}

void MonitoredProcessGroup::broadcast(Tensor& t, int root) {
  run(Kind::Collective, "broadcast", root, t.defined() ? t.nbytes() : 0,
      [&] { inner_->broadcast(t, root); });
}

void MonitoredProcessGroup::allgather(const Tensor& in, Tensor& out,
                                      const std::vector<std::int64_t>& counts) {
  run(Kind::Collective, "allgather", -1, out.defined() ? out.nbytes() : 0,
      [&] { inner_->allgather(in, out, counts); });
}

void MonitoredProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                           const std::vector<std::int64_t>& counts, ReduceOp op) {
  run(Kind::Collective, "reduce_scatter", -1, in.defined() ? in.nbytes() : 0,
      [&] { inner_->reduce_scatter(in, out, counts, op); });
}

void MonitoredProcessGroup::all_to_all(const Tensor& in,
                                       const std::vector<std::int64_t>& send_counts, Tensor& out,
                                       const std::vector<std::int64_t>& recv_counts) {
  run(Kind::Collective, "all_to_all", -1, in.defined() ? in.nbytes() : 0,
      [&] { inner_->all_to_all(in, send_counts, out, recv_counts); });
}

void MonitoredProcessGroup::barrier() {
  run(Kind::Collective, "barrier", -1, 0, [&] { inner_->barrier(); });
}

std::shared_ptr<ProcessGroup> MonitoredProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  std::shared_ptr<ProcessGroup> sub;
  // Only the members call it: not a call every rank makes, so no CommScope.
  throw_if_failed("new_subgroup");
  const std::uint64_t id = record_start("new_subgroup", -1, 0);
  try {
    const CommWaitScope blocked;
    sub = inner_->new_subgroup(ranks);
  } catch (...) {
    on_failure("new_subgroup", id);
  }
  Rec::finish(id, Rec::State::Completed);
  return wrap(std::move(sub), monitor_, false);
}

std::shared_ptr<ProcessGroup> MonitoredProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  std::shared_ptr<ProcessGroup> sub;
  run(Kind::Collective, "split_groups", -1, 0, [&] { sub = inner_->split_groups(groups); });
  return wrap(std::move(sub), monitor_, false);
}

}  // namespace dtensor::detail
