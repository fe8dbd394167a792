#include "ops/call_scoped_group.h"

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

// A Work whose wait() confirms the call's agreement first: the messages it
// waits for are sized by the very arguments the check compares.
class ConfirmingWork final : public Work {
 public:
  ConfirmingWork(std::shared_ptr<Work> inner, PendingAgreement& agreement)
      : inner_(std::move(inner)), agreement_(agreement) {}
  void wait(std::chrono::milliseconds timeout) override {
    agreement_.confirm();
    inner_->wait(timeout);
  }

 private:
  std::shared_ptr<Work> inner_;
  PendingAgreement& agreement_;
};

}  // namespace

CallScopedGroup::CallScopedGroup(std::shared_ptr<ProcessGroup> inner, PendingAgreement& agreement,
                                 int tag_base)
    : ForwardingProcessGroup(std::move(inner)), agreement_(agreement), tag_base_(tag_base) {}

int CallScopedGroup::call_tag(int tag) const {
  check_arg(tag >= 0 && tag < 8, "dispatch",
            "tag: a handler's point-to-point tags are 0..7 (one per exchange in flight), got {}",
            tag);
  return tag_base_ + tag;
}

void CallScopedGroup::confirm_unless_tags_separate(const Tensor& t) {
  if (!inner_->matches_by_tag(t.device().type)) agreement_.confirm();
}

std::shared_ptr<Work> CallScopedGroup::confirming(std::shared_ptr<Work> w) {
  return std::make_shared<ConfirmingWork>(std::move(w), agreement_);
}

std::shared_ptr<Work> CallScopedGroup::isend(const Tensor& t, int dst, int tag) {
  confirm_unless_tags_separate(t);
  return confirming(inner_->isend(t, dst, call_tag(tag)));
}

std::shared_ptr<Work> CallScopedGroup::irecv(const Tensor& t, int src, int tag) {
  confirm_unless_tags_separate(t);
  return confirming(inner_->irecv(t, src, call_tag(tag)));
}

std::vector<std::shared_ptr<Work>> CallScopedGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  std::vector<P2POp> tagged = ops;
  for (auto& op : tagged) {
    confirm_unless_tags_separate(op.tensor);
    op.tag = call_tag(op.tag);
  }
  auto works = inner_->batch_isend_irecv(tagged);
  for (auto& w : works)
    w = confirming(std::move(w));
  return works;
}

void CallScopedGroup::allreduce(Tensor& t, ReduceOp op) {
  agreement_.confirm();
  inner_->allreduce(t, op);
}

void CallScopedGroup::broadcast(Tensor& t, int root) {
  agreement_.confirm();
  inner_->broadcast(t, root);
}

void CallScopedGroup::allgather(const Tensor& in, Tensor& out,
                                const std::vector<std::int64_t>& counts) {
  agreement_.confirm();
  inner_->allgather(in, out, counts);
}

void CallScopedGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                     const std::vector<std::int64_t>& counts, ReduceOp op) {
  agreement_.confirm();
  inner_->reduce_scatter(in, out, counts, op);
}

void CallScopedGroup::all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                                 Tensor& out, const std::vector<std::int64_t>& recv_counts) {
  agreement_.confirm();
  inner_->all_to_all(in, send_counts, out, recv_counts);
}

void CallScopedGroup::barrier() {
  agreement_.confirm();
  inner_->barrier();
}

std::shared_ptr<ProcessGroup> CallScopedGroup::new_subgroup(const std::vector<int>& ranks) {
  agreement_.confirm();
  return inner_->new_subgroup(ranks);
}

std::shared_ptr<ProcessGroup> CallScopedGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  agreement_.confirm();
  return inner_->split_groups(groups);
}

}  // namespace dtensor
