// How a transposed-convolution call is spelled as OpSchema arguments: typed
// calls (dtensor/ops/typed_call.h) whose fields are named once, decoded once
// per call and handed to every stage.
//
//   conv_transpose:          input, weight, bias|None, stride, padding, output_padding,
//                            dilation, groups
//   conv_transpose_backward: grad_output, input, weight, stride, padding, output_padding,
//                            dilation, groups, mask
//
// Parameters are expanded to the input's spatial rank before they are
// encoded, so equal calls have equal keys; the mask travels as {input,
// weight, bias} flags.
#pragma once

#include <optional>
#include <vector>

#include "dtensor/ops/typed_call.h"
#include "dtensor/ops/window_ops.h"
#include "ops/detail/output_mask_codec.h"
#include "ops/detail/weighted_call.h"

namespace dtensor {

/// ConvTransposeParams as five arguments: stride, padding, output_padding,
/// dilation, groups.
template <>
struct ArgCodec<ConvTransposeParams>
    : MembersCodec<ConvTransposeParams, Member<&ConvTransposeParams::stride, "stride">,
                   Member<&ConvTransposeParams::padding, "padding">,
                   Member<&ConvTransposeParams::output_padding, "output_padding">,
                   Member<&ConvTransposeParams::dilation, "dilation">,
                   Member<&ConvTransposeParams::groups, "groups">> {};

}  // namespace dtensor

namespace dtensor::tconv {

inline constexpr const char* kForwardOp = "conv_transpose";
inline constexpr const char* kBackwardOp = "conv_transpose_backward";
inline constexpr const char* kComponent = "conv_transpose";
inline constexpr detail::WeightedOpNames kNames{kComponent,
                                                kForwardOp,
                                                kBackwardOp,
                                                "the transposed convolution's output",
                                                "[N, C_in, spatial...]",
                                                "[C_in, C_out/groups, k...]"};

/// A "conv_transpose" call and a "conv_transpose_backward" call.
using ForwardCall = detail::WeightedForwardCall<ConvTransposeParams>;
using BackwardCall = detail::WeightedBackwardCall<ConvTransposeParams>;

/// Checks a transposed convolution's operands (PyTorch's rules): input [N,
/// C_in, L...] with 1 to 3 spatial dims (L >= 1), weight [C_in, C_out/groups,
/// k...], bias [C_out] (nullopt: none), stride and dilation >= 1, padding >=
/// 0, 0 <= output_padding < stride or dilation, groups dividing C_in, every
/// output length >= 1. Returns the parameters expanded to the input's
/// spatial dims. InvalidArgument whose message starts with the offending
/// parameter ("input", "weight", "bias", "stride", "padding",
/// "output_padding", "dilation", "groups").
ConvTransposeParams check_args(const Shape& input, const Shape& weight,
                               const std::optional<Shape>& bias, const ConvTransposeParams& params);

/// The output length along one dim: (L-1)*s - 2p + d*(k-1) + output_padding + 1.
std::int64_t output_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                           std::int64_t dilation, std::int64_t padding,
                           std::int64_t output_padding);

/// [N, C_out, O...] after check_args(input, weight, nullopt, params).
Shape output_shape(const Shape& input, const Shape& weight, const ConvTransposeParams& params);

/// The convolution whose backward-data the transposed convolution is, with
/// no padding: over n inputs it gives (n - 1) * stride + extent outputs, the
/// first at -padding (the caller keeps the range it wants).
ConvParams local_convolution(const ConvTransposeParams& params);

}  // namespace dtensor::tconv
