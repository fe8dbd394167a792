// How a normalisation call is spelled as OpSchema arguments: typed calls
// (dtensor/ops/typed_call.h) whose fields are named once, and the one view
// of them every part of the normalisation reads (decoded once per call).
//
//   batch_norm:              input, weight|None, bias|None, running_mean|None, running_var|None,
//                            training, momentum, eps
//   group_norm:              input, num_groups, weight|None, bias|None, eps
//   instance_norm:           input, weight|None, bias|None, eps
//   layer_norm:              input, weight|None, bias|None, eps
//   batch_norm_backward:     grad_output, input, weight|None, running_mean|None,
//                            running_var|None, training, eps, mask
//   group_norm_backward:     grad_output, input, num_groups, weight|None, eps, mask
//   instance_norm_backward:  grad_output, input, weight|None, eps, mask
//   layer_norm_backward:     grad_output, input, weight|None, eps, mask
//
// group_norm, instance_norm and layer_norm take one more, optional, last
// argument: the activation fused into the output, "relu" (absent: none).
// Their backwards take, likewise, the fused relu's output (the forward's
// result): the gradient then counts only where it is positive.
//
// mask is {input, weight, bias} as 0/1 ints. Outputs: the forward gives the
// output, then (batch_norm training with running statistics) the updated
// running_mean and running_var; the backward gives the gradients the mask
// asks for, in that order.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/normalization.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/typed_call.h"
#include "ops/detail/output_mask_codec.h"

namespace dtensor::norm {

/// The calls, their fields named once (instance_norm and layer_norm share a
/// layout). The fused activation's name and the fused relu's output are
/// tails of at most one argument.
struct BatchNormCall {
  const DTensor& input;
  const DTensor* weight;
  const DTensor* bias;
  const DTensor* running_mean;
  const DTensor* running_var;
  bool training;
  double momentum;
  double eps;
  using Fields = CallFields<const DTensor&, const DTensor*, const DTensor*, const DTensor*,
                            const DTensor*, bool, double, double>;
  static constexpr Fields::Names names{"input",       "weight",   "bias",     "running_mean",
                                       "running_var", "training", "momentum", "eps"};
};
struct BatchNormBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  const DTensor* weight;
  const DTensor* running_mean;
  const DTensor* running_var;
  bool training;
  double eps;
  NormOutputMask mask;
  using Fields = CallFields<const DTensor&, const DTensor&, const DTensor*, const DTensor*,
                            const DTensor*, bool, double, NormOutputMask>;
  static constexpr Fields::Names names{"grad_output", "input",    "weight", "running_mean",
                                       "running_var", "training", "eps",    "mask"};
};
struct GroupNormCall {
  const DTensor& input;
  std::int64_t num_groups;
  const DTensor* weight;
  const DTensor* bias;
  double eps;
  ArgTail<std::string> activation;
  using Fields = CallFields<const DTensor&, std::int64_t, const DTensor*, const DTensor*, double,
                            ArgTail<std::string>>;
  static constexpr Fields::Names names{"input", "num_groups", "weight",
                                       "bias",  "eps",        "activation"};
};
struct GroupNormBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  std::int64_t num_groups;
  const DTensor* weight;
  double eps;
  NormOutputMask mask;
  ArgTail<const DTensor*> relu_output;
  using Fields = CallFields<const DTensor&, const DTensor&, std::int64_t, const DTensor*, double,
                            NormOutputMask, ArgTail<const DTensor*>>;
  static constexpr Fields::Names names{"grad_output", "input", "num_groups", "weight",
                                       "eps",         "mask",  "relu_output"};
};
struct AffineNormCall {  // instance_norm, layer_norm
  const DTensor& input;
  const DTensor* weight;
  const DTensor* bias;
  double eps;
  ArgTail<std::string> activation;
  using Fields =
      CallFields<const DTensor&, const DTensor*, const DTensor*, double, ArgTail<std::string>>;
  static constexpr Fields::Names names{"input", "weight", "bias", "eps", "activation"};
};
struct AffineNormBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  const DTensor* weight;
  double eps;
  NormOutputMask mask;
  ArgTail<const DTensor*> relu_output;
  using Fields = CallFields<const DTensor&, const DTensor&, const DTensor*, double, NormOutputMask,
                            ArgTail<const DTensor*>>;
  static constexpr Fields::Names names{"grad_output", "input", "weight",
                                       "eps",         "mask",  "relu_output"};
};

enum class NormKind { Batch, Group, Instance, Layer };

struct NormOp {
  NormKind kind;
  const char* name;
  const char* backward_name;
};
inline constexpr NormOp kBatchNorm{NormKind::Batch, "batch_norm", "batch_norm_backward"};
inline constexpr NormOp kGroupNorm{NormKind::Group, "group_norm", "group_norm_backward"};
inline constexpr NormOp kInstanceNorm{NormKind::Instance, "instance_norm",
                                      "instance_norm_backward"};
inline constexpr NormOp kLayerNorm{NormKind::Layer, "layer_norm", "layer_norm_backward"};

/// What every stage reads of any of the calls above (forward or backward),
/// decoded once per call. Pointers are null for absent arguments; they
/// point into the OpSchema the call was decoded from.
struct NormCall {
  NormOp op;
  bool backward = false;
  const DTensor* grad_output = nullptr;
  const DTensor* input = nullptr;
  const DTensor* weight = nullptr;
  const DTensor* bias = nullptr;          // forward only
  const DTensor* running_mean = nullptr;  // batch_norm only
  const DTensor* running_var = nullptr;
  bool training = true;  // batch_norm only; the others always use the input's statistics
  double momentum = 0.1;
  double eps = 1e-5;
  std::int64_t num_groups = 1;  // group_norm only
  NormOutputMask mask;          // backward only
  bool relu = false;            // forward: the output is relu(norm(x))
  /// backward: the fused relu's output, placed like the input; null: none.
  const DTensor* relu_output = nullptr;

  /// The call `s` holds, decoded once per schema: every stage shares it.
  static const NormCall& of(const OpSchema& s, const NormOp& op, bool backward) {
    return decoded<NormCall>(s, [&] { return decode(s, op, backward); });
  }
  static NormCall decode(const OpSchema& s, const NormOp& op, bool backward);

  /// The batch statistics are used (every op but batch_norm in eval mode).
  bool uses_batch_stats() const { return op.kind != NormKind::Batch || training; }
  /// batch_norm's forward returns the updated running statistics.
  bool updates_running_stats() const {
    return !backward && op.kind == NormKind::Batch && training && running_mean != nullptr;
  }
  /// Number of outputs and their global shapes and dtypes.
  std::vector<TensorMeta> output_meta() const;
  /// PyTorch's checks, each naming its argument (InvalidArgument).
  void validate() const;
};

/// The argument lists (the typed calls' encodings), one per operator and
/// direction.
std::vector<OpArg> encode_batch_norm(const DTensor& input, const std::optional<DTensor>& weight,
                                     const std::optional<DTensor>& bias,
                                     const std::optional<DTensor>& running_mean,
                                     const std::optional<DTensor>& running_var, bool training,
                                     double momentum, double eps);
std::vector<OpArg> encode_batch_norm_backward(const DTensor& grad_output, const DTensor& input,
                                              const std::optional<DTensor>& weight,
                                              const std::optional<DTensor>& running_mean,
                                              const std::optional<DTensor>& running_var,
                                              bool training, double eps,
                                              const NormOutputMask& mask);
/// group_norm (num_groups given) and instance_norm / layer_norm (num_groups nullopt).
std::vector<OpArg> encode_norm(const DTensor& input, std::optional<std::int64_t> num_groups,
                               const std::optional<DTensor>& weight,
                               const std::optional<DTensor>& bias, double eps,
                               NormActivation activation = NormActivation::None);
std::vector<OpArg> encode_norm_backward(const DTensor& grad_output, const DTensor& input,
                                        std::optional<std::int64_t> num_groups,
                                        const std::optional<DTensor>& weight, double eps,
                                        const NormOutputMask& mask,
                                        const std::optional<DTensor>& relu_output = std::nullopt);

}  // namespace dtensor::norm
