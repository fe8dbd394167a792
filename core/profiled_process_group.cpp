#include "core/detail/profiled_process_group.h"

#include <optional>

#include "core/detail/operator_profile.h"
#include "dtensor/core/comm_scope.h"

namespace dtensor::detail {
namespace {

// Adds the time `fn` took to the thread's communication time, when the
// profile is on.
template <typename Fn>
decltype(auto) timed(Fn&& fn) {
  if (!operator_profiling_on()) return fn();
  struct Count {
    std::int64_t start = profile_clock_ns();
    ~Count() { add_comm_time(profile_clock_ns() - start); }
  } count;
  return fn();
}

class ProfiledWork final : public Work {
 public:
  explicit ProfiledWork(std::shared_ptr<Work> inner) : inner_(std::move(inner)) {}
  void wait(std::chrono::milliseconds timeout) override {
    timed([&] { inner_->wait(timeout); });
  }

 private:
  std::shared_ptr<Work> inner_;
};

std::shared_ptr<Work> profiled(std::shared_ptr<Work> w) {
  return w ? std::make_shared<ProfiledWork>(std::move(w)) : w;
}

}  // namespace

std::shared_ptr<ProcessGroup> ProfiledProcessGroup::wrap(std::shared_ptr<ProcessGroup> inner,
                                                         bool is_world) {
  if (!inner) return inner;
  return std::make_shared<ProfiledProcessGroup>(std::move(inner), is_world);
}

template <typename Fn>
void ProfiledProcessGroup::collective(std::string_view op, Fn&& fn) {
  // As the monitor's layer: only the world's collectives are calls of their
  // own; a subgroup's run inside a public call that already counts.
  std::optional<CommScope> scope;
  if (is_world_) scope.emplace(op);
  timed(fn);
}

std::shared_ptr<Work> ProfiledProcessGroup::isend(const Tensor& t, int dst, int tag) {
  return profiled(timed([&] { return inner()->isend(t, dst, tag); }));
}

std::shared_ptr<Work> ProfiledProcessGroup::irecv(const Tensor& t, int src, int tag) {
  return profiled(timed([&] { return inner()->irecv(t, src, tag); }));
}

std::vector<std::shared_ptr<Work>> ProfiledProcessGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  auto works = timed([&] { return inner()->batch_isend_irecv(ops); });
  for (auto& w : works)
    w = profiled(std::move(w));
  return works;
}

void ProfiledProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  collective("allreduce", [&] { inner()->allreduce(t, op); });
}

void ProfiledProcessGroup::broadcast(Tensor& t, int root) {
  collective("broadcast", [&] { inner()->broadcast(t, root); });
}

void ProfiledProcessGroup::allgather(const Tensor& in, Tensor& out,
                                     const std::vector<std::int64_t>& counts) {
  collective("allgather", [&] { inner()->allgather(in, out, counts); });
}

void ProfiledProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                          const std::vector<std::int64_t>& counts, ReduceOp op) {
  collective("reduce_scatter", [&] { inner()->reduce_scatter(in, out, counts, op); });
}

void ProfiledProcessGroup::all_to_all(const Tensor& in,
                                      const std::vector<std::int64_t>& send_counts, Tensor& out,
                                      const std::vector<std::int64_t>& recv_counts) {
  collective("all_to_all", [&] { inner()->all_to_all(in, send_counts, out, recv_counts); });
}

void ProfiledProcessGroup::barrier() {
  collective("barrier", [&] { inner()->barrier(); });
}

std::shared_ptr<ProcessGroup> ProfiledProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  return wrap(inner()->new_subgroup(ranks), false);
}

std::shared_ptr<ProcessGroup> ProfiledProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  std::shared_ptr<ProcessGroup> sub;
  collective("split_groups", [&] { sub = inner()->split_groups(groups); });
  return wrap(std::move(sub), false);
}

}  // namespace dtensor::detail
