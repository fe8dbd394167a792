// A ProcessGroup over NCCL for CUDA tensors (CPU tensors go to Gloo through the
// routing group, see core/detail/routing_process_group.h).
//
// - The unique id travels through the rendezvous Store. split_groups (every
//   row of a mesh dim at once) splits the communicator with ncclCommSplit
//   instead; new_subgroup, which only the members call, cannot (see there).
// - Communicators are non-blocking: every call is polled by the watchdog
//   (watchdog.h), which aborts the communicator past the group's timeout.
// - All work runs on the library's stream of the group's device, so it is
//   ordered with copies, kernels and cuDNN without extra synchronisation.
// - NCCL has no tags: messages between two ranks match in posting order.
// - Arguments are checked, and messages a rank sends to itself delivered, by
//   the validating layer every backend's groups are wrapped in
//   (core/detail/validating_process_group.h): this class assumes valid calls.
#pragma once

#include <nccl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/nccl/watchdog.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/process_group.h"
#include "dtensor/core/store.h"

namespace dtensor::nccl_backend {

/// The communicator and its abort state, shared with the Work handles.
/// ncclCommAbort frees the communicator, and the fault monitor may call
/// abort() from its own thread while another waits: every use of `comm`
/// after initialisation therefore holds `mu` and looks at `aborted` first.
struct Comm {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{300000};
  std::mutex mu;
  bool aborted = false;
  std::string abort_reason;
  void abort(const std::string& reason);
  /// The communicator's asynchronous state: Pending while a non-blocking
  /// call is in progress, Failed with NCCL's error or the abort's reason.
  Poll poll_state();
  /// Polls the communicator until a non-blocking call has been accepted.
  void settle(const std::string& what);
  /// Runs `enqueue` (calls on `comm`) under the lock, or throws CommError
  /// naming `what` when the communicator was aborted.
  template <typename F>
  void use(const std::string& what, F&& enqueue) {
    std::lock_guard lock(mu);
    throw_if_aborted(what);
    enqueue();
  }

 private:
  void throw_if_aborted(const std::string& what) const;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  static std::shared_ptr<ProcessGroup> create_world(const BackendInit& init);
  NcclProcessGroup(int rank, int size, std::vector<int> global_ranks, std::shared_ptr<Store> store,
                   std::string prefix, std::chrono::milliseconds timeout, int device);
  ~NcclProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  /// NCCL pairs sends with receives by their order on the communicator.
  bool matches_by_tag(DeviceType) const override { return false; }
  /// This group's own GPU only.
  bool accepts_device(Device device) const override;
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  std::chrono::milliseconds timeout() const override { return comm_->timeout; }
  /// Aborts the communicator (the fault monitor calls it when another rank
  /// failed): pending and later waits fail at once with CommError naming
  /// `reason`, instead of at their timeout.
  void abort(const std::string& reason) override;

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
  /// A new communicator from a unique id shared through the store: only the
  /// members call new_subgroup, and ncclCommSplit needs every parent rank.
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;
  /// One ncclCommSplit of this communicator (color = the list's index, key =
  /// the rank in it, NCCL_SPLIT_NOCOLOR for a rank in no list); the child is
  /// non-blocking like its parent and settled under the watchdog.
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override;

 private:
  /// A group over a communicator that already exists (a split's child).
  NcclProcessGroup(int rank, int size, std::vector<int> global_ranks, std::shared_ptr<Store> store,
                   std::string prefix, std::shared_ptr<Comm> comm);
  void connect();
  /// Runs `issue` (NCCL calls, inside a group when `grouped`) on the stream and
  /// returns a handle on its completion.
  template <typename F>
  std::shared_ptr<Work> launch(const std::string& what, bool grouped, F&& issue,
                               std::vector<Tensor> keep);

  int rank_, size_;
  std::vector<int> global_ranks_;
  std::shared_ptr<Store> store_;
  std::string prefix_;
  std::shared_ptr<Comm> comm_;
  std::map<std::vector<int>, int> subgroups_made_;
  int splits_made_ = 0;
};

}  // namespace dtensor::nccl_backend
