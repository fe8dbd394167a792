// Normalisation on DTensors, forward and backward: batch_norm, group_norm,
// instance_norm and layer_norm with torch.nn.functional's semantics, on any
// mesh, with the batch, the channels and any spatial dims sharded (uneven and
// empty shards included).
//
// Statistics over a sharded dim are merged across the ranks that shard it in
// ONE collective per pass (docs/operators.md, "Normalisation"): the forward
// merges every statistic's (count, mean, M2) together (Chan's parallel
// update, in f64, in rank order, so every rank holds bitwise the same
// statistics); the backward all-reduces sum(g) and sum(g * xhat) for every
// statistic in one f64 buffer. Nothing moves when no reduced dim is sharded.
//
// Weight and bias gradients come out like a convolution's weight gradient:
// Partial(sum) on the mesh dims that shard the batch (or, for the [C]
// parameters, space), sharded like the parameter on the mesh dims that shard
// the parameter's own dims, replicated elsewhere. grad_input is placed like
// the caller's input.
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// Which gradients a *_backward computes. grad_weight is sum(dy * xhat) and
/// grad_bias sum(dy) whether or not the forward had a weight or bias (they
/// are the gradients the parameters would get); clear the flags of the
/// parameters you do not have to skip them.
struct NormOutputMask {
  bool input = true;
  bool weight = true;
  bool bias = true;
};

/// The gradients a *_backward returns, each present when the mask asks.
struct NormGrads {
  std::optional<DTensor> grad_input{};   // placed like the input
  std::optional<DTensor> grad_weight{};  // see the header comment
  std::optional<DTensor> grad_bias{};
};

/// What batch_norm returns: the output and the running statistics to use
/// from now on. In training they are the updated ones (new DTensors: the
/// inputs are never written to); in eval mode they are the inputs
/// themselves. nullopt when no running statistics were given.
struct BatchNormResult {
  DTensor output;
  std::optional<DTensor> running_mean{};
  std::optional<DTensor> running_var{};
};

/// F.batch_norm. input [N, C, spatial...] (0 to 3 spatial dims); weight, bias,
/// running_mean, running_var [C] (running statistics both or neither; eval
/// mode needs them). Training normalises with the batch statistics over N
/// and every spatial dim (biased variance) and, when running statistics are
/// given, returns them updated: r = (1 - momentum) * r + momentum * s, with
/// the UNBIASED variance (var * n / (n - 1)) for running_var. Eval mode uses
/// the running statistics and communicates nothing. Training with one value
/// per channel (N * spatial == 1) throws InvalidArgument, as PyTorch does; an
/// empty input gives an empty output and leaves the running statistics as
/// they were.
BatchNormResult batch_norm(const DTensor& input, const std::optional<DTensor>& weight,
                           const std::optional<DTensor>& bias,
                           const std::optional<DTensor>& running_mean,
                           const std::optional<DTensor>& running_var, bool training,
                           double momentum = 0.1, double eps = 1e-5);

/// Gradients of batch_norm. In training mode the batch statistics are
/// recomputed from `input` (one collective for them, one for the two
/// gradient sums); running statistics are not needed (ignored when given).
/// In eval mode running_mean and running_var are required and nothing is
/// communicated.
NormGrads batch_norm_backward(const DTensor& grad_output, const DTensor& input,
                              const std::optional<DTensor>& weight,
                              const std::optional<DTensor>& running_mean,
                              const std::optional<DTensor>& running_var, bool training,
                              double eps = 1e-5, const NormOutputMask& mask = {});

/// An activation applied to the normalised output in the same pass (one
/// read and one write of the tensor fewer than norm then relu); its
/// gradient is taken in the operator's backward. Equal to relu(norm(x)).
enum class NormActivation { None, ReLU };

/// F.group_norm: statistics per (sample, group) over the group's C /
/// num_groups channels and every spatial dim. input [N, C, spatial...]
/// (0 to 3 spatial dims), C divisible by num_groups; weight, bias [C].
/// Channel sharding is kept when every shard boundary falls on a group
/// boundary; otherwise the channels are gathered first.
DTensor group_norm(const DTensor& input, std::int64_t num_groups,
                   const std::optional<DTensor>& weight = std::nullopt,
                   const std::optional<DTensor>& bias = std::nullopt, double eps = 1e-5,
                   NormActivation activation = NormActivation::None);
NormGrads group_norm_backward(const DTensor& grad_output, const DTensor& input,
                              std::int64_t num_groups, const std::optional<DTensor>& weight,
                              double eps = 1e-5, const NormOutputMask& mask = {});

/// F.instance_norm with use_input_stats (its default; no running statistics):
/// statistics per (sample, channel) over the spatial dims. input [N, C,
/// spatial...] with 1 to 3 spatial dims of more than one element in all;
/// weight, bias [C].
DTensor instance_norm(const DTensor& input, const std::optional<DTensor>& weight = std::nullopt,
                      const std::optional<DTensor>& bias = std::nullopt, double eps = 1e-5,
                      NormActivation activation = NormActivation::None);
NormGrads instance_norm_backward(const DTensor& grad_output, const DTensor& input,
                                 const std::optional<DTensor>& weight, double eps = 1e-5,
                                 const NormOutputMask& mask = {});

/// F.layer_norm with normalized_shape = input.shape[1:]: statistics per
/// sample over C and every spatial dim. input [N, C, spatial...] (0 to 3
/// spatial dims); weight, bias of shape [C, spatial...], sharded like the
/// input's dims 1.. (a replicated weight is sliced to them, locally).
DTensor layer_norm(const DTensor& input, const std::optional<DTensor>& weight = std::nullopt,
                   const std::optional<DTensor>& bias = std::nullopt, double eps = 1e-5,
                   NormActivation activation = NormActivation::None);
NormGrads layer_norm_backward(const DTensor& grad_output, const DTensor& input,
                              const std::optional<DTensor>& weight, double eps = 1e-5,
                              const NormOutputMask& mask = {});

}  // namespace dtensor
