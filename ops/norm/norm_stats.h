// What a normalisation normalises with, on the ops side of the kernel line:
// the layout of a rank's block for the kernels (dtensor/ops/kernels/norm.h),
// and the per-statistic mean and 1 / sqrt(var + eps) from merged moments or
// from batch_norm's running statistics. Statistics are few (one per channel,
// group or sample), f64 on the host; the elements never pass through here.
#pragma once

#include <cstdint>

#include "dtensor/ops/kernels/norm.h"
#include "ops/norm/norm_call.h"

namespace dtensor::norm {

/// The kernels' view of a local block of `local` shape ([n, c, spatial...]);
/// `channels` and `num_groups` are the global call's.
kernels::NormLayout layout_of(NormKind kind, const Shape& local, std::int64_t channels,
                              std::int64_t num_groups);

/// Per statistic: [stats] f64 host tensors, and the element count of each.
struct Stats {
  Tensor mean, invstd, count;
};

/// From merged moments: rows of `width` doubles (count, mean, M2, ...), the
/// variance biased (M2 / count), as the normalisation uses it.
Stats stats_from_moments(const Tensor& moments, std::int64_t width, double eps);
/// From running statistics (batch_norm in eval mode): any dtype and device.
Stats stats_from_running(const Tensor& mean, const Tensor& var, double eps);

/// The means over each statistic's elements of g and of g * xhat, which an
/// input gradient needs beside the statistics.
struct GradMeans {
  Tensor mean_g, mean_gxhat;
};
/// From packed gradient sums (rows of 5 doubles: count, mean, M2, sum g and
/// sum g * (x - row mean), as kNormBackwardReduce writes them and the merge
/// leaves them) and the statistics `st` normalises with, whose mean may
/// differ from a row's (a fused chain's statistics come from its forward).
GradMeans grad_means(const Tensor& packed, const Stats& st);

/// A small f64 host result (statistics, parameter gradients) as the output
/// `spec` describes: its dtype, on the mesh's device.
DTensor wrap_small(const Tensor& f64, const DTensorSpec& spec);

/// batch_norm's running statistics: f64 host tensors.
struct RunningStats {
  Tensor mean, var;
};
/// The running statistics after a training step, from the batch's merged
/// moments (rows of `width` doubles: count, mean, M2, ...):
/// r = (1 - momentum) r + momentum s, with the unbiased variance; a channel
/// with no elements (an empty batch) keeps its values. `mean` and `var` of
/// any dtype and device.
RunningStats updated_running_stats(const Tensor& mean, const Tensor& var, const Tensor& moments,
                                   std::int64_t width, double momentum);

}  // namespace dtensor::norm
