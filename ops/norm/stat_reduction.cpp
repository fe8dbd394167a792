#include "ops/norm/stat_reduction.h"

#include "dtensor/ops/kernels/norm_stats.h"

namespace dtensor::norm {
namespace {

// Every member's `mine` gathered over the plan's group (the block of the
// mesh dims that shard the reduced dims: its ranks hold parts of the same
// statistics, laid out alike): [size, numel].
Tensor gather(OpCall& call, const ReductionPlan& plan, const Tensor& mine) {
  ProcessGroup& group = call.group(plan.mesh_dims);
  const std::int64_t width = mine.numel();
  Tensor all = Tensor::empty({group.size() * width}, DType::F64);
  group.allgather(mine.view({width}), all,
                  std::vector<std::int64_t>(static_cast<std::size_t>(group.size()), width));
  return all;
}

}  // namespace

bool is_reduced_dim(NormKind kind, std::int64_t d) {
  return d >= 2 || (kind == NormKind::Batch && d == 0) || (kind == NormKind::Layer && d == 1);
}

std::vector<std::int64_t> reduced_dims(NormKind kind, std::int64_t ndim) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 0; d < ndim; ++d)
    if (is_reduced_dim(kind, d)) out.push_back(d);
  return out;
}

ReductionPlan plan_reduction(NormKind kind, const DeviceMesh& mesh, const Placements& input) {
  ReductionPlan plan;
  for (std::int64_t m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = input[static_cast<std::size_t>(m)];
    if (mesh.size(m) > 1 && p.is_shard() && is_reduced_dim(kind, p.dim()))
      plan.mesh_dims.push_back(m);
  }
  return plan;
}

namespace {

// `all`: every member's records of `width`, in rank order; merged into `records`.
void merge_records(const Tensor& all, Tensor& records, std::int64_t width) {
  run_kernel(kernels::kNormMergeRecords, DeviceType::CPU, DType::F64, {all, records, width});
}

}  // namespace

void merge_moments(OpCall& call, const ReductionPlan& plan, Tensor& moments) {
  if (!plan.communicates() || moments.numel() == 0) return;
  merge_records(gather(call, plan, moments), moments, 3);
}

void merge_moments_and_grad_sums(OpCall& call, const ReductionPlan& plan, Tensor& packed) {
  if (!plan.communicates() || packed.numel() == 0) return;
  merge_records(gather(call, plan, packed), packed, 5);
}

PendingMerge::PendingMerge(OpCall& call, const ReductionPlan& plan, Tensor packed, Records records,
                           int stream)
    : packed_(std::move(packed)), records_(records) {
  const std::int64_t width = packed_.numel();
  if (!plan.communicates() || width == 0) return;
  ProcessGroup& group = call.group(plan.mesh_dims);
  all_ = Tensor::empty({group.size() * width}, DType::F64);
  // This rank's slot of the gathered records is also what it sends: finish()
  // waits for every send before it merges.
  Tensor mine = all_.narrow(0, group.rank() * width, width);
  mine.copy_(packed_.view({width}));
  const int tag = stream;  // OpCall::group() moves it into the call's tag space
  std::vector<P2POp> ops;
  for (int q = 0; q < group.size(); ++q) {
    if (q == group.rank()) continue;
    ops.push_back(P2POp::recv(all_.narrow(0, q * width, width), q, tag));
    ops.push_back(P2POp::send(mine, q, tag));
  }
  works_ = group.batch_isend_irecv(ops);
}

Tensor& PendingMerge::finish() {
  if (!all_.defined()) return packed_;
  for (auto& w : works_)
    w->wait();
  works_.clear();
  merge_records(all_, packed_, records_ == Records::Moments ? 3 : 5);
  all_ = Tensor();
  return packed_;
}

}  // namespace dtensor::norm
