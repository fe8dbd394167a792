// One process group over two backends, chosen per call by the tensors' device
// (docs/design.md §3: CPU tensors -> Gloo, CUDA tensors -> NCCL). Without a CUDA
// backend, CUDA tensors are staged: copied to host memory, sent over the CPU
// backend, copied back. Lives in core because it only uses the ProcessGroup
// interface and Tensor copies; it includes no backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/process_group.h"

namespace dtensor::detail {

enum class Route {
  Cpu,         // the CPU backend, tensors as they are
  Cuda,        // the CUDA backend, tensors as they are
  CudaStaged,  // the CPU backend, through host copies
};

/// Which way a tensor on `device` goes; `has_cuda_backend` false means staging.
Route route_for(Device device, bool has_cuda_backend);
std::string_view route_name(Route r);

class RoutingProcessGroup final : public ProcessGroup {
 public:
  /// `cuda` may be null: CUDA tensors are then staged over `cpu`. Both groups
  /// must have the same members in the same order.
  RoutingProcessGroup(std::shared_ptr<ProcessGroup> cpu, std::shared_ptr<ProcessGroup> cuda);

  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  std::string backend_name() const override;
  const std::vector<int>& global_ranks() const override { return cpu_->global_ranks(); }
  std::chrono::milliseconds timeout() const override { return cpu_->timeout(); }

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
  /// Splits both inner groups (so NCCL splits its communicator).
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override;
  /// The answer of the group `device`'s tensors go through (staged CUDA
  /// tensors: the CPU group's).
  bool matches_by_tag(DeviceType device) const override;
  /// The CPU group's devices, and CUDA devices: the CUDA group's, or any when staged.
  bool accepts_device(Device device) const override;
  /// The CPU group's: the halo chains it prices run on the CPU.
  double message_seconds() const override { return cpu_->message_seconds(); }
  void abort(const std::string& reason) override;

  const std::shared_ptr<ProcessGroup>& cpu_group() const { return cpu_; }
  /// Null when CUDA tensors are staged.
  const std::shared_ptr<ProcessGroup>& cuda_group() const { return cuda_; }

 private:
  /// The route shared by all of an operation's tensors (InvalidArgument if mixed).
  Route route(const char* op, std::initializer_list<const Tensor*> tensors) const;
  ProcessGroup& target(Route r) const { return r == Route::Cuda ? *cuda_ : *cpu_; }

  std::shared_ptr<ProcessGroup> cpu_;
  std::shared_ptr<ProcessGroup> cuda_;
};

}  // namespace dtensor::detail
