// How a convolution call is spelled as OpSchema arguments: typed calls
// (dtensor/ops/typed_call.h) whose fields are named once, decoded once per
// call and handed to every stage.
//
//   convolution:          input, weight, bias|None, stride, padding, dilation, groups, padding_mode
//   convolution_backward: grad_output, input, weight, stride, padding, dilation, groups,
//                         padding_mode, mask
//
// Parameters are expanded to the input's spatial rank before they are
// encoded, so equal calls have equal keys; padding travels as l0,r0,l1,r1,...,
// the padding mode by name and the mask as {input, weight, bias} flags.
#pragma once

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/typed_call.h"
#include "ops/detail/output_mask_codec.h"
#include "ops/detail/weighted_call.h"

namespace dtensor {

/// The padding mode by name ("zeros", "reflect", "replicate", "circular").
template <>
struct ArgCodec<PaddingMode>
    : EnumByNameCodec<PaddingMode, padding_mode_name, PaddingMode::Zeros, PaddingMode::Reflect,
                      PaddingMode::Replicate, PaddingMode::Circular> {};

/// ConvParams as five arguments: stride, padding pairs (flat), dilation,
/// groups, padding mode (by name).
template <>
struct ArgCodec<ConvParams>
    : MembersCodec<ConvParams, Member<&ConvParams::stride, "stride">,
                   Member<&ConvParams::padding, "padding">,
                   Member<&ConvParams::dilation, "dilation">, Member<&ConvParams::groups, "groups">,
                   Member<&ConvParams::padding_mode, "padding_mode">> {};

}  // namespace dtensor

namespace dtensor::conv {

inline constexpr const char* kForwardOp = "convolution";
inline constexpr const char* kBackwardOp = "convolution_backward";
inline constexpr detail::WeightedOpNames kNames{"conv",
                                                kForwardOp,
                                                kBackwardOp,
                                                "the convolution's output",
                                                "[N, C, spatial...]",
                                                "[OC, C/groups, k...]"};

/// A "convolution" call and a "convolution_backward" call.
using ForwardCall = detail::WeightedForwardCall<ConvParams>;
using BackwardCall = detail::WeightedBackwardCall<ConvParams>;

}  // namespace dtensor::conv
