// The profile's communication time (dtensor/core/profile.h) for a world that
// has no fault monitor's layer to time it: backend mpi started without a
// store, whose MPI launcher watches the ranks instead. It times what the
// monitor's layer times, the same way: every collective, every post of a
// point-to-point message and every wait for one, in the calling thread's
// open call; the world's own collectives are calls of their own (CommScope).
// Off, a call costs one relaxed atomic load more.
#pragma once

#include <memory>

#include "dtensor/core/forwarding_process_group.h"

namespace dtensor::detail {

class ProfiledProcessGroup final : public ForwardingProcessGroup {
 public:
  /// `inner` behind the timing layer (nullptr stays nullptr); `is_world`:
  /// its own collectives are outermost calls.
  static std::shared_ptr<ProcessGroup> wrap(std::shared_ptr<ProcessGroup> inner, bool is_world);

  ProfiledProcessGroup(std::shared_ptr<ProcessGroup> inner, bool is_world)
      : ForwardingProcessGroup(std::move(inner)), is_world_(is_world) {}

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

 private:
  template <typename Fn>
  void collective(std::string_view op, Fn&& fn);

  bool is_world_;
};

}  // namespace dtensor::detail
