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

}  // namespace dtensor
