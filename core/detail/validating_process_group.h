// The contract every process-group backend is held to, in one place: each
// group a backend factory makes (Gloo, MPI, NCCL, or one a user registers)
// is wrapped in this layer before anything else sees it, as c10d's
// ProcessGroupWrapper wraps a group. It
//
//  - checks every argument before the backend sees it: tensors defined,
//    contiguous and on a device the backend takes (ProcessGroup::
//    accepts_device); peers and roots inside the group; tags >= 0; counts
//    one per rank, none negative, adding up to the tensors' sizes; in and out
//    of one dtype; subgroup member lists. A bad argument is InvalidArgument
//    naming it, "[dtensor.<backend>] <op>: <param>...", and reaches no
//    backend, so every rank that passes the same bad value refuses alike and
//    the group stays usable;
//  - checks a whole batch before posting any of it, so a bad entry leaves
//    nothing posted;
//  - delivers messages a rank sends to itself (SelfMailbox), so that a send to
//    one's own rank works alike on every backend, NCCL's included;
//  - wraps the subgroups the backend makes alike.
//
// What only a backend can know (MPI's int counts, a group broken by an
// earlier failure) stays in the backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/detail/self_mailbox.h"
#include "dtensor/core/forwarding_process_group.h"

namespace dtensor::detail {

class ValidatingProcessGroup final : public ForwardingProcessGroup {
 public:
  /// `backend` as a factory returned it; null stays null.
  static std::shared_ptr<ProcessGroup> wrap(std::shared_ptr<ProcessGroup> backend);

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
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override;

 private:
  explicit ValidatingProcessGroup(std::shared_ptr<ProcessGroup> inner);

  void check_tensor(const Tensor& t, const char* param, const char* op) const;
  void check_rank(int rank, const char* param, const char* op) const;
  void check_p2p(const Tensor& t, int peer, int tag, bool is_send, const char* op) const;
  /// counts: one per rank, none negative; returns their sum.
  std::int64_t check_counts(const std::vector<std::int64_t>& counts, const char* param,
                            const char* op) const;
  void check_same_dtype(const Tensor& in, const Tensor& out, const char* op) const;

  const std::string backend_;  // the component of every error
  SelfMailbox self_;
};

}  // namespace dtensor::detail
