// A process group that hands every call to the group it wraps: the base of
// the layers that stand in front of a group, as c10d's ProcessGroupWrapper
// does — the library's own (the validating layer in front of every backend,
// the fault monitor's, the call-scoped group a handler talks through) and a
// user's (counting, logging, injecting faults in tests). A layer overrides
// only what it adds to; identity, counters, abort and the rest pass through.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/process_group.h"

namespace dtensor {

class ForwardingProcessGroup : public ProcessGroup {
 public:
  explicit ForwardingProcessGroup(std::shared_ptr<ProcessGroup> inner) : inner_(std::move(inner)) {}

  /// The group this one wraps.
  const std::shared_ptr<ProcessGroup>& inner() const { return inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  const std::vector<int>& global_ranks() const override { return inner_->global_ranks(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  bool matches_by_tag(DeviceType device) const override { return inner_->matches_by_tag(device); }
  bool accepts_device(Device device) const override { return inner_->accepts_device(device); }
  double message_seconds() const override { return inner_->message_seconds(); }
  CommCounters& counters() override { return inner_->counters(); }
  const CommCounters& counters() const override { return inner_->counters(); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) override {
    return inner_->isend(t, dst, tag);
  }
  std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag = 0) override {
    return inner_->irecv(t, src, tag);
  }
  std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    return inner_->batch_isend_irecv(ops);
  }
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) override { inner_->allreduce(t, op); }
  void broadcast(Tensor& t, int root) override { inner_->broadcast(t, root); }
  void allgather(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts) override {
    inner_->allgather(in, out, counts);
  }
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts,
                      ReduceOp op = ReduceOp::Sum) override {
    inner_->reduce_scatter(in, out, counts, op);
  }
  void all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                  const std::vector<std::int64_t>& recv_counts) override {
    inner_->all_to_all(in, send_counts, out, recv_counts);
  }
  void barrier() override { inner_->barrier(); }
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    return inner_->new_subgroup(ranks);
  }
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override {
    return inner_->split_groups(groups);
  }

 protected:
  const std::shared_ptr<ProcessGroup> inner_;
};

}  // namespace dtensor
