#include "core/detail/validating_process_group.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/detail/split_plan.h"
#include "dtensor/core/errors.h"

namespace dtensor::detail {

std::shared_ptr<ProcessGroup> ValidatingProcessGroup::wrap(std::shared_ptr<ProcessGroup> backend) {
  if (!backend) return nullptr;
  // Never twice: a subgroup of a wrapped group comes back wrapped already
  // when a backend builds it through another wrapped group.
  if (std::dynamic_pointer_cast<ValidatingProcessGroup>(backend)) return backend;
  return std::shared_ptr<ProcessGroup>(new ValidatingProcessGroup(std::move(backend)));
}

ValidatingProcessGroup::ValidatingProcessGroup(std::shared_ptr<ProcessGroup> inner)
    : ForwardingProcessGroup(std::move(inner)),
      backend_(inner_->backend_name()),
      self_(backend_, inner_->timeout()) {}

// ---- the checks ----

void ValidatingProcessGroup::check_tensor(const Tensor& t, const char* param,
                                          const char* op) const {
  check_arg(t.defined(), backend_, "{}: {} is an undefined tensor", op, param);
  DTENSOR_CHECK_ARG(inner_->accepts_device(t.device()), backend_,
                    "{}: {} is on {}, a device the {} backend does not take", op, param,
                    t.device().str(), backend_);
  DTENSOR_CHECK_ARG(t.is_contiguous(), backend_, "{}: {} must be contiguous ({})", op, param,
                    t.str());
}

void ValidatingProcessGroup::check_rank(int rank, const char* param, const char* op) const {
  DTENSOR_CHECK_ARG(rank >= 0 && rank < size(), backend_,
                    "{}: {}={} is outside the group of {} ranks", op, param, rank, size());
}

void ValidatingProcessGroup::check_p2p(const Tensor& t, int peer, int tag, bool is_send,
                                       const char* op) const {
  check_tensor(t, "t", op);
  check_rank(peer, is_send ? "dst" : "src", op);
  check_arg(tag >= 0, backend_, "{}: tag={} must be >= 0", op, tag);
}

std::int64_t ValidatingProcessGroup::check_counts(const std::vector<std::int64_t>& counts,
                                                  const char* param, const char* op) const {
  DTENSOR_CHECK_ARG(static_cast<int>(counts.size()) == size(), backend_,
                    "{}: {} has {} entries for a group of {} ranks", op, param, counts.size(),
                    size());
  std::int64_t total = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    check_arg(counts[q] >= 0, backend_, "{}: {}[{}]={} is negative", op, param, q, counts[q]);
    total += counts[q];
  }
  return total;
}

void ValidatingProcessGroup::check_same_dtype(const Tensor& in, const Tensor& out,
                                              const char* op) const {
  DTENSOR_CHECK_ARG(in.dtype() == out.dtype(), backend_, "{}: out is {} but in is {}", op,
                    dtype_name(out.dtype()), dtype_name(in.dtype()));
  DTENSOR_CHECK_ARG(in.device() == out.device(), backend_, "{}: out is on {} but in is on {}", op,
                    out.device().str(), in.device().str());
}

// ---- point to point ----

std::shared_ptr<Work> ValidatingProcessGroup::isend(const Tensor& t, int dst, int tag) {
  check_p2p(t, dst, tag, true, "isend");
  if (dst == rank()) return self_.post_send(t, dst, tag);
  return inner_->isend(t, dst, tag);
}

std::shared_ptr<Work> ValidatingProcessGroup::irecv(const Tensor& t, int src, int tag) {
  check_p2p(t, src, tag, false, "irecv");
  if (src == rank()) return self_.post_recv(t, src, tag);
  return inner_->irecv(t, src, tag);
}

std::vector<std::shared_ptr<Work>> ValidatingProcessGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  for (const P2POp& op : ops)
    check_p2p(op.tensor, op.peer, op.tag, op.kind == P2POp::Kind::Send, "batch_isend_irecv");
  // The backend gets the batch less the messages to this rank, in its order
  // (NCCL posts it as one group); those are delivered here. Most batches
  // have none: they go on as they are, not copied.
  const int me = rank();
  if (std::none_of(ops.begin(), ops.end(), [&](const P2POp& op) { return op.peer == me; }))
    return inner_->batch_isend_irecv(ops);
  std::vector<P2POp> remote;
  std::vector<std::size_t> remote_index;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].peer != rank()) {
      remote.push_back(ops[i]);
      remote_index.push_back(i);
    }
  std::vector<std::shared_ptr<Work>> works(ops.size());
  if (!remote.empty()) {
    std::vector<std::shared_ptr<Work>> posted = inner_->batch_isend_irecv(remote);
    for (std::size_t k = 0; k < posted.size(); ++k)
      works[remote_index[k]] = std::move(posted[k]);
  }
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].peer == rank())
      works[i] = ops[i].kind == P2POp::Kind::Send
                     ? self_.post_send(ops[i].tensor, rank(), ops[i].tag)
                     : self_.post_recv(ops[i].tensor, rank(), ops[i].tag);
  return works;
}

// ---- collectives ----

void ValidatingProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  check_tensor(t, "t", "allreduce");
  inner_->allreduce(t, op);
}

void ValidatingProcessGroup::broadcast(Tensor& t, int root) {
  check_tensor(t, "t", "broadcast");
  check_rank(root, "root", "broadcast");
  inner_->broadcast(t, root);
}

void ValidatingProcessGroup::allgather(const Tensor& in, Tensor& out,
                                       const std::vector<std::int64_t>& counts) {
  const char* op = "allgather";
  check_tensor(in, "in", op);
  check_tensor(out, "out", op);
  const std::int64_t total = check_counts(counts, "counts", op);
  check_same_dtype(in, out, op);
  const auto me = static_cast<std::size_t>(rank());
  DTENSOR_CHECK_ARG(in.numel() == counts[me], backend_, "{}: in has {} elements but counts[{}]={}",
                    op, in.numel(), me, counts[me]);
  DTENSOR_CHECK_ARG(out.numel() == total, backend_,
                    "{}: out has {} elements but the counts add up to {}", op, out.numel(), total);
  inner_->allgather(in, out, counts);
}

void ValidatingProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                            const std::vector<std::int64_t>& counts, ReduceOp op) {
  const char* name = "reduce_scatter";
  check_tensor(in, "in", name);
  check_tensor(out, "out", name);
  const std::int64_t total = check_counts(counts, "counts", name);
  check_same_dtype(in, out, name);
  const auto me = static_cast<std::size_t>(rank());
  DTENSOR_CHECK_ARG(in.numel() == total, backend_,
                    "{}: in has {} elements but the counts add up to {}", name, in.numel(), total);
  DTENSOR_CHECK_ARG(out.numel() == counts[me], backend_,
                    "{}: out has {} elements but counts[{}]={}", name, out.numel(), me, counts[me]);
  inner_->reduce_scatter(in, out, counts, op);
}

void ValidatingProcessGroup::all_to_all(const Tensor& in,
                                        const std::vector<std::int64_t>& send_counts, Tensor& out,
                                        const std::vector<std::int64_t>& recv_counts) {
  const char* op = "all_to_all";
  check_tensor(in, "in", op);
  check_tensor(out, "out", op);
  const std::int64_t sent = check_counts(send_counts, "send_counts", op);
  const std::int64_t received = check_counts(recv_counts, "recv_counts", op);
  check_same_dtype(in, out, op);
  DTENSOR_CHECK_ARG(in.numel() == sent, backend_,
                    "{}: in has {} elements but send_counts add up to {}", op, in.numel(), sent);
  DTENSOR_CHECK_ARG(out.numel() == received, backend_,
                    "{}: out has {} elements but recv_counts add up to {}", op, out.numel(),
                    received);
  const auto me = static_cast<std::size_t>(rank());
  check_arg(send_counts[me] == recv_counts[me], backend_,
            "{0}: send_counts[{1}]={2} but recv_counts[{1}]={3} (what a rank sends itself)", op, me,
            send_counts[me], recv_counts[me]);
  check_arg(!in.shares_storage_with(out) || in.nbytes() == 0, backend_,
            "{}: in and out must not share storage", op);
  inner_->all_to_all(in, send_counts, out, recv_counts);
}

// ---- subgroups ----

std::shared_ptr<ProcessGroup> ValidatingProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  const char* op = "new_subgroup";
  check_arg(!ranks.empty(), backend_, "{}: ranks is empty", op);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    DTENSOR_CHECK_ARG(ranks[i] >= 0 && ranks[i] < size(), backend_,
                      "{}: ranks[{}]={} is outside the group of {} ranks", op, i, ranks[i], size());
    DTENSOR_CHECK_ARG(i == 0 || ranks[i] > ranks[i - 1], backend_,
                      "{}: ranks must be strictly increasing, got [{}]", op,
                      fmt::join(ranks, ", "));
  }
  DTENSOR_CHECK_ARG(std::find(ranks.begin(), ranks.end(), rank()) != ranks.end(), backend_,
                    "{}: rank {} is not in ranks [{}]; only the members call new_subgroup", op,
                    rank(), fmt::join(ranks, ", "));
  return wrap(inner_->new_subgroup(ranks));
}

std::shared_ptr<ProcessGroup> ValidatingProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  split_membership(groups, rank(), size());  // InvalidArgument naming `groups`
  return wrap(inner_->split_groups(groups));
}

}  // namespace dtensor::detail
