#include "ops/norm/stat_reduction.h"

#include <algorithm>

#include "dtensor/ops/kernels/norm.h"

namespace dtensor::norm {
namespace {

// The ranks of `group` (the mesh's group) that share this rank's coordinate
// on every mesh dim outside the plan, in group-rank order.
std::vector<int> plan_members(const DeviceMesh& mesh, const ReductionPlan& plan) {
  std::vector<int> sorted = mesh.ranks();  // the mesh's group orders its members ascending
  std::sort(sorted.begin(), sorted.end());
  const auto& me = *mesh.get_coordinate();
  std::vector<int> out;
  for (std::size_t q = 0; q < sorted.size(); ++q) {
    const auto coord = *mesh.coordinate_of(sorted[q]);
    bool same = true;
    for (std::int64_t m = 0; m < mesh.ndim() && same; ++m) {
      const bool in_plan =
          std::find(plan.mesh_dims.begin(), plan.mesh_dims.end(), m) != plan.mesh_dims.end();
      same = in_plan || coord[static_cast<std::size_t>(m)] == me[static_cast<std::size_t>(m)];
    }
    if (same) out.push_back(static_cast<int>(q));
  }
  return out;
}

// The group the plan's collective runs on. A single mesh dim's group comes
// through the call (tags, agreement); the mesh's group is used directly, so
// the dispatcher's agreement check is confirmed first.
ProcessGroup& plan_group(OpCall& call, const ReductionPlan& plan) {
  if (plan.mesh_dims.size() == 1) return call.group(plan.mesh_dims[0]);
  call.confirm_agreement();
  return *call.schema().mesh().get_mesh_group();
}

// Every member's copy of `mine`, zero-padded to `width` elements, gathered
// over `group`: [size, width].
Tensor gather(ProcessGroup& group, const Tensor& mine, std::int64_t width) {
  Tensor padded = mine;
  if (width != mine.numel()) {
    padded = Tensor::zeros({width}, DType::F64);
    padded.narrow(0, 0, mine.numel()).copy_(mine.view({mine.numel()}));
  }
  Tensor all = Tensor::empty({group.size() * width}, DType::F64);
  group.allgather(padded, all,
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
  plan.whole_mesh = true;
  for (std::int64_t m = 0; m < mesh.ndim(); ++m) {
    if (mesh.size(m) == 1) continue;
    const Placement& p = input[static_cast<std::size_t>(m)];
    if (p.is_shard() && is_reduced_dim(kind, p.dim()))
      plan.mesh_dims.push_back(m);
    else
      plan.whole_mesh = false;
  }
  return plan;
}

void chan_merge(double* a, const double* b) {
  kernels::merge_moments_into(a, b);
}

void merge_moments(OpCall& call, const ReductionPlan& plan, Tensor& moments,
                   std::int64_t max_stats) {
  // Every rank of the group holds as many statistics (or pads to max_stats):
  // all skip alike.
  const std::int64_t width = plan.subset() ? 3 * max_stats : moments.numel();
  if (!plan.communicates() || width == 0) return;
  ProcessGroup& group = plan_group(call, plan);
  const Tensor all = gather(group, moments, width);
  std::vector<int> members;
  if (plan.subset()) {
    members = plan_members(call.schema().mesh(), plan);
  } else {
    for (int q = 0; q < group.size(); ++q)
      members.push_back(q);
  }
  const std::int64_t k = moments.numel();
  double* out = moments.data<double>();
  const double* in = all.data<double>();
  std::fill(out, out + k, 0.0);
  for (int q : members)
    for (std::int64_t s = 0; s < k; s += 3)
      chan_merge(out + s, in + q * width + s);
}

void merge_moments_and_grad_sums(OpCall& call, const ReductionPlan& plan, Tensor& packed,
                                 std::int64_t max_stats) {
  constexpr std::int64_t kWidth = 5;
  const std::int64_t width = plan.subset() ? kWidth * max_stats : packed.numel();
  if (!plan.communicates() || width == 0) return;
  ProcessGroup& group = plan_group(call, plan);
  const Tensor all = gather(group, packed, width);
  std::vector<int> members;
  if (plan.subset()) {
    members = plan_members(call.schema().mesh(), plan);
  } else {
    for (int q = 0; q < group.size(); ++q)
      members.push_back(q);
  }
  const std::int64_t stats = packed.numel() / kWidth;
  double* out = packed.data<double>();
  const double* in = all.data<double>();
  for (std::int64_t s = 0; s < stats; ++s) {
    double m[3] = {0, 0, 0};  // the moments first: the shift needs the merged mean
    for (int q : members)
      chan_merge(m, in + q * width + kWidth * s);
    double g = 0, h = 0;
    for (int q : members) {
      const double* r = in + q * width + kWidth * s;
      g += r[3];
      h += r[4] + (r[1] - m[1]) * r[3];
    }
    double* o = out + kWidth * s;
    o[0] = m[0];
    o[1] = m[1];
    o[2] = m[2];
    o[3] = g;
    o[4] = h;
  }
}

}  // namespace dtensor::norm
