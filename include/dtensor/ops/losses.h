// Loss functions on DTensors, forward and backward, with
// torch.nn.functional's semantics. Each forward returns a 0-d DTensor
// replicated on every mesh dim: every rank sums its own shard (in f64) into a
// Partial scalar, which is then reduced (one all-reduce per mesh dim that
// held shards). Each backward returns the gradient of the loss with respect
// to `input`, placed like `input`; the loss's own gradient is 1 unless given.
// Argument layouts: docs/operators.md.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

enum class LossReduction { Mean, Sum };
std::string_view loss_reduction_name(LossReduction r);

/// mean or sum of (input - target)^2 (same shape and dtype). Any Shard or
/// Replicate placement (the target is moved to the input's placement at the
/// lowest cost); a Partial input or target is reduced first.
DTensor mse_loss(const DTensor& input, const DTensor& target,
                 LossReduction reduction = LossReduction::Mean);
/// grad * 2 (input - target) (/ numel for mean).
DTensor mse_loss_backward(const DTensor& input, const DTensor& target,
                          LossReduction reduction = LossReduction::Mean, double grad = 1.0);
/// The same with the loss's gradient a 0-d DTensor (reduced if Partial).
DTensor mse_loss_backward(const DTensor& grad_output, const DTensor& input, const DTensor& target,
                          LossReduction reduction = LossReduction::Mean);

/// F.cross_entropy with class-probability targets over dim 1: input and
/// target [N, C, d1, ...] (rank >= 2, same shape and dtype);
/// loss = -sum target * log_softmax(input, 1), divided by N * d1 * ... for
/// mean (NaN for an empty input, as PyTorch). Dim 1 is never sharded: an
/// input sharded along it is redistributed first (to the cheapest placement
/// without Shard(1)).
DTensor cross_entropy(const DTensor& input, const DTensor& target,
                      LossReduction reduction = LossReduction::Mean);
/// grad * (softmax(input) * sum_c target - target) (/ N * d1 * ... for mean).
DTensor cross_entropy_backward(const DTensor& input, const DTensor& target,
                               LossReduction reduction = LossReduction::Mean, double grad = 1.0);
DTensor cross_entropy_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& target,
                               LossReduction reduction = LossReduction::Mean);

// ---- cross_entropy with options: class-index targets, label smoothing ------

/// torch.nn.functional.cross_entropy's options.
struct CrossEntropyOptions {
  LossReduction reduction = LossReduction::Mean;
  /// Class-index targets: a position whose target equals it contributes
  /// nothing and is left out of the mean's count. Probability targets accept
  /// only a negative one (as PyTorch: refused naming `ignore_index`).
  std::int64_t ignore_index = -100;
  /// s in [0, 1] (else refused naming `label_smoothing`): the target becomes
  /// (1 - s) * target + s / C (for indices, (1 - s) * onehot + s / C).
  double label_smoothing = 0.0;
};

/// F.cross_entropy(input, target, ignore_index=, reduction=,
/// label_smoothing=) over dim 1 of input [N, C, d1, ...] (rank >= 2, a
/// floating dtype). The target's dtype chooses the kind:
///  - I64: class indices [N, d1, ...], each in [0, C) or equal to
///    ignore_index; loss = (1 - s) * -log_softmax[target] + s / C *
///    -sum_c log_softmax[c] per counted position, its mean over the counted
///    positions (NaN when none is counted, as PyTorch). An index outside
///    [0, C) that is not ignore_index is refused naming `target` on every
///    rank, wherever it lies. The target is placed like the input's other
///    dims (redistributed to match; a Partial target is refused), the count
///    taken across ranks.
///  - the input's dtype: class probabilities of the input's shape, as
///    cross_entropy(input, target, reduction) with the smoothed target.
/// Dim 1 is never sharded (the input is moved off Shard(1) first).
DTensor cross_entropy(const DTensor& input, const DTensor& target,
                      const CrossEntropyOptions& options);
/// The gradient with respect to `input`, placed like `input`: for indices
/// grad * (softmax(input) - ((1 - s) * onehot + s / C)) at the counted
/// positions (0 at the others), / the count for mean.
DTensor cross_entropy_backward(const DTensor& input, const DTensor& target,
                               const CrossEntropyOptions& options, double grad = 1.0);
DTensor cross_entropy_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& target, const CrossEntropyOptions& options);

// ---- Pointwise losses --------------------------------------------------------
// l1_loss, smooth_l1_loss, huber_loss and binary_cross_entropy_with_logits:
// one term per element of input and target (same shape and dtype), summed
// or averaged over every element; placements as mse_loss's. Each backward
// returns grad * d term / d input (/ numel for mean), placed like `input`;
// the target's gradient is provided for the first three (the negated
// input's), not for binary_cross_entropy_with_logits.

/// |input - target|; the gradient is sign(input - target) (0 where equal).
DTensor l1_loss(const DTensor& input, const DTensor& target,
                LossReduction reduction = LossReduction::Mean);
DTensor l1_loss_backward(const DTensor& input, const DTensor& target,
                         LossReduction reduction = LossReduction::Mean, double grad = 1.0);

/// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target);
/// beta >= 0 (0 is l1_loss), a negative beta is refused naming `beta`.
DTensor smooth_l1_loss(const DTensor& input, const DTensor& target,
                       LossReduction reduction = LossReduction::Mean, double beta = 1.0);
DTensor smooth_l1_loss_backward(const DTensor& input, const DTensor& target,
                                LossReduction reduction = LossReduction::Mean, double beta = 1.0,
                                double grad = 1.0);

/// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); delta > 0 (else
/// refused naming `delta`).
DTensor huber_loss(const DTensor& input, const DTensor& target,
                   LossReduction reduction = LossReduction::Mean, double delta = 1.0);
DTensor huber_loss_backward(const DTensor& input, const DTensor& target,
                            LossReduction reduction = LossReduction::Mean, double delta = 1.0,
                            double grad = 1.0);

/// -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))) for logits x, in the
/// stable form max(x, 0) - x t + log1p(exp(-|x|)); the gradient is
/// sigmoid(x) - t.
DTensor binary_cross_entropy_with_logits(const DTensor& input, const DTensor& target,
                                         LossReduction reduction = LossReduction::Mean);
DTensor binary_cross_entropy_with_logits_backward(const DTensor& input, const DTensor& target,
                                                  LossReduction reduction = LossReduction::Mean,
                                                  double grad = 1.0);

}  // namespace dtensor
