// Loss functions on DTensors, forward and backward, with
// torch.nn.functional's semantics. Each forward returns a 0-d DTensor
// replicated on every mesh dim: every rank sums its own shard (in f64) into a
// Partial scalar, which is then reduced (one all-reduce per mesh dim that
// held shards). Each backward returns the gradient of the loss with respect
// to `input`, placed like `input`; the loss's own gradient is 1 unless given.
// Argument layouts: docs/operators.md.
#pragma once

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
