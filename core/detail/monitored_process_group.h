// The process group init_process_group hands out in a multi-rank job: the
// backend's group wrapped, as c10d's ProcessGroupWrapper wraps one, so that
// failure handling is in one place rather than in every backend and handler:
//
//  - every operation goes into the flight recorder (one ring-buffer write
//    when it starts, one when it ends);
//  - the world group's own collectives are communicating calls for the
//    desync check (CommScope), like dispatch's and redistribute's;
//  - once another rank failed (FaultMonitor), pending and later operations
//    throw CommError "<op>: rank R failed: <reason>" (or the desync message);
//  - a failure of this rank's own is published for the others.
//
// Subgroups it makes are wrapped alike.
//
// A job without a fault monitor (backend mpi started without a store, whose
// MPI launcher watches the ranks, or a world of one) gets the layer without
// one: the flight recorder, the world's calls and the profile's
// communication time as in any other job; failures pass through as raised.
#pragma once

#include <memory>
#include <string>

#include "core/detail/fault_monitor.h"
#include "dtensor/core/forwarding_process_group.h"
#include "dtensor/core/process_group.h"

namespace dtensor::detail {

class MonitoredProcessGroup final : public ForwardingProcessGroup,
                                    public std::enable_shared_from_this<MonitoredProcessGroup> {
 public:
  static std::shared_ptr<MonitoredProcessGroup> wrap(std::shared_ptr<ProcessGroup> inner,
                                                     std::shared_ptr<FaultMonitor> monitor,
                                                     bool is_world);

  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) override;
  std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag = 0) override;
  std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops) override;
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& t, int root) override;
  void allgather(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts) override;
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts,
                      ReduceOp op = ReduceOp::Sum) override;
  void all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                  const std::vector<std::int64_t>& recv_counts) override;
  void barrier() override;
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override;

  enum class Kind { Collective, PointToPoint };
  /// Runs `fn` as operation `op`: recorded, and with a failure turned into
  /// the job's cause.
  template <typename Fn>
  void run(Kind kind, std::string_view op, int peer, std::uint64_t bytes, Fn&& fn);
  /// Records a started operation that a Work handle finishes.
  std::uint64_t record_start(std::string_view op, int peer, std::uint64_t bytes);
  /// Called from a catch block with the recorder entry `id`: rethrows the
  /// job's cause when another rank failed, else reports this rank's failure
  /// and rethrows the original (bad input is neither: it is rethrown as is).
  [[noreturn]] void on_failure(std::string_view op, std::uint64_t id);
  /// The wait on one point-to-point message, named only when it fails (a
  /// string per message would be built on every exchange's path).
  struct MessageWait {
    bool send = false;
    int peer = -1, tag = 0;
    std::string str() const;  // "wait(send to rank 1 tag 3)"
  };
  /// Throws the job's cause if another rank failed already.
  void throw_if_failed(std::string_view op) const;
  void throw_if_failed(const MessageWait& wait) const;

 private:
  MonitoredProcessGroup(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<FaultMonitor> monitor,
                        bool is_world);
  std::shared_ptr<Work> wrap_work(std::shared_ptr<Work> inner, const Tensor& t, MessageWait wait);

  const std::shared_ptr<FaultMonitor> monitor_;
  const bool is_world_;
  const std::string name_;  // "world", "g[0,1]": the group in recorder entries
};

}  // namespace dtensor::detail
