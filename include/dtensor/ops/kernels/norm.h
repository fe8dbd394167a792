// The kernel slots of the normalisations (batch, group, instance and layer
// norm), forward and backward. ops/ plans the statistics and merges them
// across ranks; these do the arithmetic on one rank's block.
//
// A rank's block [n, c, spatial...] is read as n * c rows of s contiguous
// elements; row (i, ch) belongs to one statistic (NormLayout::stat), so each
// kernel works row by row. Statistics and their sums are f64 CPU tensors
// whatever the data's dtype and device (they are few, and merged across ranks
// on the host); data tensors are contiguous, of the slot's dtype and device.
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

struct NormLayout {
  std::int64_t n = 0, c = 0, s = 0;  // local batch, channels, spatial elements per channel
  /// Statistics per sample: 0 when the samples share them (batch_norm: one
  /// per channel), else group_norm's groups, instance_norm's channels, 1 for layer_norm.
  std::int64_t stats_per_sample = 0;
  /// Consecutive channels of a sample that share a statistic (group_norm's
  /// group size, layer_norm's c, else 1).
  std::int64_t group_size = 1;
  /// weight and bias per element of [c, spatial...] (layer_norm), else per channel.
  bool elementwise_affine = false;

  std::int64_t stats() const { return stats_per_sample ? n * stats_per_sample : c / group_size; }
  std::int64_t stat(std::int64_t i, std::int64_t ch) const {
    return i * stats_per_sample + ch / group_size;
  }
  std::int64_t params() const { return elementwise_affine ? c * s : c; }
};

/// moments = this block's (count, mean, M2) per statistic: [stats, 3] f64.
/// Exact-enough for any magnitude: M2 is summed around each row's own mean and
/// rows are merged with Chan's update, never as sum(x^2) - n mean^2.
struct NormMomentsArgs {
  /// [n, c, spatial...]; may be a view (e.g. narrowed along a spatial dim):
  /// a kernel reads it in place when it can, else copies it first.
  Tensor x;
  NormLayout layout;
  Tensor moments;  // out
};

/// y = (x - mean) * invstd * weight + bias, then max(y, 0) when `relu`.
struct NormApplyArgs {
  Tensor x;
  NormLayout layout;
  Tensor mean, invstd;  // [stats] f64
  Tensor weight, bias;  // [params], the data's dtype; undefined: none
  bool relu = false;
  Tensor y;  // out
};

/// The backward's first pass, g = grad_output * weight: packed = (count,
/// mean, M2, sum(g), sum(g * (x - m))) per statistic, [stats, 5] f64, where m
/// is this block's own mean of the statistic (the caller shifts the last sum
/// to the merged mean).
struct NormBackwardReduceArgs {
  Tensor grad_output, x;
  NormLayout layout;
  Tensor weight;  // undefined: none
  Tensor packed;  // out
  /// A fused relu's output y (the forward's result): grad_output counts
  /// only where y > 0 (and where y is NaN). Undefined: no activation.
  Tensor relu_output = Tensor();
};

/// The backward's second pass. With `mean_g` and `mean_gxhat` (the merged
/// means of g and g * xhat per statistic, [stats] f64):
///   grad_input = invstd * (g - mean_g - xhat * mean_gxhat)   (batch statistics)
/// without them (statistics that are constants, batch_norm in eval mode):
///   grad_input = invstd * g.
/// Besides, this block's parameter sums: grad_weight = sum(grad_output * xhat),
/// grad_bias = sum(grad_output), per parameter ([params] in the data's dtype,
/// on its device; the kernel chooses the precision it sums in).
/// Every output is optional (undefined: not wanted).
struct NormBackwardApplyArgs {
  Tensor grad_output, x;
  NormLayout layout;
  Tensor mean, invstd;            // [stats] f64
  Tensor weight;                  // undefined: none
  Tensor mean_g, mean_gxhat;      // [stats] f64; undefined: constant statistics
  Tensor grad_input;              // out
  Tensor grad_weight, grad_bias;  // out, [params] in the data's dtype and device
  Tensor relu_output = Tensor();  // as NormBackwardReduceArgs::relu_output
};

/// Chan's parallel update: the moments (count, mean, M2) of a and b
/// together, into a. Used for rows within a kernel and for ranks after it.
inline void merge_moments_into(double* a, const double* b) {
  if (b[0] == 0) return;
  if (a[0] == 0) {
    a[0] = b[0];
    a[1] = b[1];
    a[2] = b[2];
    return;
  }
  const double n = a[0] + b[0];
  const double delta = b[1] - a[1];
  a[1] += delta * (b[0] / n);
  a[2] += b[2] + delta * delta * (a[0] * b[0] / n);
  a[0] = n;
}

inline constexpr KernelSlot<NormMomentsArgs> kNormMoments{"norm.moments"};
inline constexpr KernelSlot<NormApplyArgs> kNormApply{"norm.apply"};
inline constexpr KernelSlot<NormBackwardReduceArgs> kNormBackwardReduce{"norm.backward_reduce"};
inline constexpr KernelSlot<NormBackwardApplyArgs> kNormBackwardApply{"norm.backward_apply"};

}  // namespace dtensor::kernels
