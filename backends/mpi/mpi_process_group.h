// dtensor::ProcessGroup over MPI (CPU tensors), the backend "mpi" of the
// module libdtensor-mpi.so.
//
// The world is a duplicate of MPI_COMM_WORLD, so our messages never meet the
// application's; a subgroup is a communicator of its own (MPI_Comm_create_group
// for new_subgroup, MPI_Comm_split for split_groups). Every operation is
// non-blocking underneath (MPI_Isend/Irecv, MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgatherv, MPI_Ialltoallv, MPI_Ibarrier) and waited on with the
// group's timeout (mpi_wait.h): MPI itself has none.
//
// Failure model, as Gloo's: after a TimeoutError or CommError the group is
// unusable and every later call throws CommError naming the first failure.
// MPI cannot cancel a collective, so the memory of whatever is still pending
// stays parked with the group, and the job ends with MPI_Abort at exit
// (mpi_runtime.h) instead of hanging in MPI_Finalize.
//
// Arguments are checked, and messages a rank sends to itself delivered, by
// the validating layer every backend's groups are wrapped in
// (core/detail/validating_process_group.h); only MPI's own limits (int
// counts, the tag bound) are checked here.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtensor/core/distributed.h"
#include "dtensor/core/process_group.h"

namespace dtensor::mpi_backend {

class MpiProcessGroup : public ProcessGroup, public std::enable_shared_from_this<MpiProcessGroup> {
 public:
  /// Initialises MPI (mpi_runtime.h) and makes the world group. The rank and
  /// size are MPI's; init.rank / init.world_size, when known (>= 0), must agree.
  static std::shared_ptr<MpiProcessGroup> create_world(const BackendInit& init);

  ~MpiProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }
  /// MPI matches point-to-point messages by (source, tag, communicator).
  bool matches_by_tag(DeviceType device) const override { return device == DeviceType::CPU; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) override;
  std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag = 0) override;

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

  // ---- used by the point-to-point Work handles ----
  /// Throws CommError when an earlier failure broke the group.
  void check_usable(const std::string& op) const;
  /// Records the first failure (here and for the job's end).
  void fail(const std::string& reason);
  /// Keeps a pending request and its memory until the end of the job.
  void park_unfinished(MPI_Request request, Tensor tensor);

 private:
  MpiProcessGroup(MPI_Comm comm, std::vector<int> global_ranks, std::chrono::milliseconds timeout);
  /// Posts one non-blocking collective (under the MPI lock) and waits for it
  /// with the timeout; `keep` are the tensors MPI works on, parked on failure.
  template <typename Post>
  void run_collective(const std::string& op, std::vector<Tensor> keep, Post&& post);
  /// Every member of `ranks` sends each other one message (bounded), so that
  /// the blocking communicator creation that follows finds them all there.
  void handshake(const std::vector<int>& ranks, const std::string& op);
  std::shared_ptr<MpiProcessGroup> adopt(MPI_Comm comm, const std::vector<int>& ranks);
  int mpi_tag(int tag) const;
  std::shared_ptr<Work> post_p2p(bool is_send, const Tensor& t, int peer, int tag);

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::vector<int> global_ranks_;
  const std::chrono::milliseconds timeout_;
  int tag_ub_ = 32767;  // MPI_TAG_UB; the top tag is the handshake's

  mutable std::mutex mutex_;
  std::string failure_;  // the first failure; empty while healthy
  std::vector<std::pair<MPI_Request, std::vector<Tensor>>> parked_;
};

}  // namespace dtensor::mpi_backend
