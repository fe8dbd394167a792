// The process group a handler communicates through (OpCall::group): a
// mesh dim's group wrapped, as c10d's ProcessGroupWrapper wraps one, so that
// the cross-rank checks of dispatch happen around the handler instead of
// inside it.
//
//  - Tags: the handler's tags (0..7, one per exchange in flight at once) are
//    moved into the call's own tag space (OpCall::message_tag), so messages
//    posted before the agreement check is confirmed can never meet those of a
//    rank that was asked something else.
//  - Agreement: dispatch's check is confirmed before the first wait, the first
//    collective, the first subgroup, and, on a group that matches messages by
//    order rather than tag (NCCL), before the first post. A handler thus posts
//    its first exchange at once and the check travels with it, and no handler
//    has to know when to confirm.
#pragma once

#include <memory>

#include "dtensor/core/forwarding_process_group.h"
#include "dtensor/placement/rank_agreement.h"

namespace dtensor {

class CallScopedGroup final : public ForwardingProcessGroup {
 public:
  /// `agreement` must outlive the group and every Work it hands out (both
  /// belong to the OpCall).
  CallScopedGroup(std::shared_ptr<ProcessGroup> inner, PendingAgreement& agreement, int tag_base);

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
  int call_tag(int tag) const;
  void confirm_unless_tags_separate(const Tensor& t);
  std::shared_ptr<Work> confirming(std::shared_ptr<Work> w);

  PendingAgreement& agreement_;
  int tag_base_;
};

}  // namespace dtensor
