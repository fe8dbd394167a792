// The local half of normalisation: loops over one rank's [n, c, spatial...]
// block, in f64 whatever the dtype (the result is rounded once to it).
//
// A "statistic" is what one mean and variance are taken over:
//   batch_norm  a channel               (index ch)
//   instance    a (sample, channel)     (i * c + ch)
//   group_norm  a (sample, group)       (i * groups + ch / group_size)
//   layer_norm  a sample                (i)
// A parameter (weight, bias) is per channel, or for layer_norm per element
// of [c, spatial...]. Nothing here communicates: stat_reduction.h merges the
// per-rank pieces.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"
#include "ops/norm/norm_call.h"

namespace dtensor::norm {

struct LocalLayout {
  NormKind kind;
  std::int64_t n = 0, c = 0, s = 0;  // local batch, channels, spatial elements
  std::int64_t group_size = 1;       // group_norm: channels per group

  /// The layout of `local` ([n, c, spatial...]); group_size from the global call.
  static LocalLayout of(NormKind kind, const Shape& local, std::int64_t channels,
                        std::int64_t num_groups);
  std::int64_t stats() const;
  std::int64_t stat(std::int64_t i, std::int64_t ch) const {
    switch (kind) {
      case NormKind::Batch:
        return ch;
      case NormKind::Instance:
        return i * c + ch;
      case NormKind::Group:
        return i * (c / group_size) + ch / group_size;
      case NormKind::Layer:
        return i;
    }
    return 0;
  }
  std::int64_t params() const { return kind == NormKind::Layer ? c * s : c; }
  std::int64_t param(std::int64_t ch, std::int64_t sp) const {
    return kind == NormKind::Layer ? ch * s + sp : ch;
  }
};

/// Per statistic: what normalises it.
struct Stats {
  std::vector<double> mean, invstd, count;
};

/// The tensor's elements as f64 (row-major).
std::vector<double> to_doubles(const Tensor& t);
/// A tensor of `shape` and `dtype` from f64 values (rounded once).
Tensor from_doubles(const std::vector<double>& v, const Shape& shape, DType dtype);

/// This rank's (count, mean, M2) per statistic, two passes in f64: [stats, 3].
Tensor local_moments(const std::vector<double>& x, const LocalLayout& L);
/// mean and 1 / sqrt(biased var + eps) from merged moments.
Stats stats_from_moments(const Tensor& moments, double eps);
/// The same from running statistics (batch_norm eval mode).
Stats stats_from_running(const std::vector<double>& mean, const std::vector<double>& var,
                         double eps);

/// y = (x - mean) * invstd * weight + bias (weight, bias may be empty: none).
std::vector<double> normalize(const std::vector<double>& x, const LocalLayout& L, const Stats& st,
                              const std::vector<double>& weight, const std::vector<double>& bias);

/// This rank's sum(dy * xhat) and sum(dy) per parameter (the weight's and
/// bias's gradients before the sum over the ranks that share the parameter).
void param_grads(const std::vector<double>& dy, const std::vector<double>& x, const LocalLayout& L,
                 const Stats& st, std::vector<double>* grad_weight, std::vector<double>* grad_bias);

/// This rank's sum(g) and sum(g * xhat) per statistic, g = dy * weight: [stats, 2].
Tensor grad_sums(const std::vector<double>& dy, const std::vector<double>& x, const LocalLayout& L,
                 const Stats& st, const std::vector<double>& weight);

/// grad_input with the batch statistics: invstd * (g - mean(g) - xhat * mean(g * xhat)),
/// the means over each statistic's count, from the merged `sums`.
std::vector<double> grad_input_batch_stats(const std::vector<double>& dy,
                                           const std::vector<double>& x, const LocalLayout& L,
                                           const Stats& st, const std::vector<double>& weight,
                                           const Tensor& sums);
/// grad_input with fixed statistics (batch_norm eval): g * invstd.
std::vector<double> grad_input_fixed_stats(const std::vector<double>& dy, const LocalLayout& L,
                                           const Stats& st, const std::vector<double>& weight);

}  // namespace dtensor::norm
