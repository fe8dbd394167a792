// The kernel slots of a normalisation's statistics: the small f64 arithmetic
// between the kernels that read the data (dtensor/ops/kernels/norm.h) and
// the ones that normalise with it. The ranks' records merged into one, the
// mean and 1 / sqrt(var + eps) each statistic normalises with, the two
// gradient means an input gradient needs, and batch_norm's running
// statistics updated.
//
// Statistics are few (one per channel, group or sample) and live on the
// host as f64 whatever the data's dtype and device, so these slots are
// registered for the CPU and f64 only and run there for every device.
// Records are rows of `width` doubles: moments (count, mean, M2) in rows of
// 3, moments and gradient sums (sum g, sum g * (x - row mean)) in rows of 5.
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// Every member's records (`all`: [members * k] in rank order, k = the
/// length of `out`) merged into `out`: the moments by Chan's update in rank
/// order, the gradient sums added, each member's sum around its own mean
/// shifted to the merged mean.
struct NormMergeRecordsArgs {
  Tensor all;
  Tensor out;  // out, [stats * width]
  std::int64_t width = 3;
};

/// Per statistic, from merged records: the count, the mean and 1 / sqrt(var
/// + eps) with the biased variance (M2 / count), as the normalisation uses
/// it. From running statistics instead (batch_norm in eval mode): `records`
/// undefined, `running_var` given, and the count left untouched.
struct NormStatsArgs {
  Tensor records;  // [stats * width]
  std::int64_t width = 3;
  Tensor running_var;  // [stats]
  double eps = 1e-5;
  Tensor count, mean, invstd;  // out, [stats] (mean: records only)
};

/// The means over each statistic's elements of g and of g * xhat, from
/// merged records of 5 and the statistics normalised with (`count`, `mean`,
/// `invstd`), whose mean may differ from a record's own (a fused chain's
/// statistics come from its forward).
struct NormGradMeansArgs {
  Tensor records;              // [stats * 5]
  Tensor count, mean, invstd;  // [stats]
  Tensor mean_g, mean_gxhat;   // out, [stats]
};

/// batch_norm's running statistics after a training step, in place:
/// r = (1 - momentum) r + momentum s, the variance unbiased; a channel
/// with no elements (an empty batch) keeps its values.
struct NormRunningUpdateArgs {
  Tensor records;  // [channels * width], merged
  std::int64_t width = 3;
  double momentum = 0.1;
  Tensor mean, var;  // in and out, [channels]
};

inline constexpr KernelSlot<NormMergeRecordsArgs> kNormMergeRecords{"norm.merge_records"};
inline constexpr KernelSlot<NormStatsArgs> kNormStats{"norm.stats"};
inline constexpr KernelSlot<NormGradMeansArgs> kNormGradMeans{"norm.grad_means"};
inline constexpr KernelSlot<NormRunningUpdateArgs> kNormRunningUpdate{"norm.running_update"};

}  // namespace dtensor::kernels
