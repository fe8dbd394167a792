// The cross-rank half of a normalisation's statistics.
//
// A plan (pure: no communication) says which tensor dims a statistic spans
// and which mesh dims shard them; the ranks that differ only on those mesh
// dims hold parts of the same statistics, laid out alike (they agree on
// every other mesh coordinate, so on which samples, channels and groups they
// hold). Each pass then runs ONE collective over the group those mesh dims
// span:
//
//   merge_moments  the forward: (count, mean, M2) of every statistic, one f64
//                  record per statistic: an all-gather of the records, merged
//                  with Chan's parallel update in rank order (no
//                  cancellation, and every rank merges the same records in
//                  the same order, so all hold bitwise the same statistics);
//   merge_moments_and_grad_sums
//                  the backward: the same records with the two gradient sums
//                  beside them, taken around each rank's own mean and shifted
//                  to the merged one.
// PendingMerge does either in two halves (point to point), for a caller that
// computes something else while the records travel.
//
// The group: the block of the mesh dims that shard the reduced dims
// (OpCall::group(dims): one mesh dim's row, the whole mesh, or a block of a
// 3-D mesh), whose ranks share every other coordinate and so hold the same
// statistics.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/dispatch.h"
#include "ops/norm/norm_call.h"

namespace dtensor::norm {

/// Tensor dims a statistic spans across ranks: batch_norm N and space,
/// group_norm and instance_norm space (group_norm's channel shards hold
/// whole groups), layer_norm C and space.
bool is_reduced_dim(NormKind kind, std::int64_t d);
std::vector<std::int64_t> reduced_dims(NormKind kind, std::int64_t ndim);

struct ReductionPlan {
  /// Mesh dims of size > 1 that shard a reduced dim, ascending.
  std::vector<std::int64_t> mesh_dims;
  bool communicates() const { return !mesh_dims.empty(); }
};

ReductionPlan plan_reduction(NormKind kind, const DeviceMesh& mesh, const Placements& input);

/// `moments`: f64, contiguous, [statistics, 3] = (count, mean, M2) of this
/// rank's elements; replaced by the merged moments of the plan's ranks.
void merge_moments(OpCall& call, const ReductionPlan& plan, Tensor& moments);

/// The backward's one collective: `packed` is [statistics, 5] = (count,
/// mean, M2, sum(g), sum(g * (x - local mean))) of this rank. On return the
/// first three are the merged moments (Chan), the fourth the total sum(g),
/// the fifth the total sum(g * (x - merged mean)): each rank's centred sum
/// shifted to the merged mean, sum(g * (x - M)) = H_r + (m_r - M) * G_r, so
/// nothing cancels when the mean is far from zero.
void merge_moments_and_grad_sums(OpCall& call, const ReductionPlan& plan, Tensor& packed);

/// merge_moments or merge_moments_and_grad_sums in two halves, so that the
/// caller can compute what does not need the result while the records
/// travel (the halo chain's forward runs the next sample's convolution, its
/// backward a convolution's weight gradient). The constructor sends this
/// rank's `packed` ([statistics, 3] moments or [statistics, 5] moments and
/// gradient sums, f64, contiguous; a view is merged in place) to every other
/// rank of the plan's group and posts their receives, point to point under
/// tag `stream` (0..7, of the call's own tag space: OpCall::group); finish()
/// waits and merges, exactly as the blocking call. Records of one stream
/// meet in the order they are posted, so every rank of the group must post
/// the same merges in the same order (and take this path, not the blocking
/// one, for the same statistics).
class PendingMerge {
 public:
  enum class Records { Moments, MomentsAndGradSums };
  PendingMerge(OpCall& call, const ReductionPlan& plan, Tensor packed, Records records, int stream);
  PendingMerge(PendingMerge&&) = default;
  PendingMerge& operator=(PendingMerge&&) = default;
  /// The merged records (the `packed` given, merged in place).
  Tensor& finish();

 private:
  Tensor packed_, all_;  // all_: every member's records, in rank order
  Records records_;
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace dtensor::norm
