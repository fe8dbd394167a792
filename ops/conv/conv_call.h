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

/// ConvParams as five arguments: stride, padding pairs (flat), dilation,
/// groups, padding mode (by name).
template <>
struct ArgCodec<ConvParams> {
  using Arg = const ConvParams&;
  static constexpr std::size_t width = 5;
  static void encode(std::vector<OpArg>& out, const ConvParams& p);
  static ConvParams decode(const OpSchema& s, std::size_t at, std::string_view field);
};

}  // namespace dtensor

namespace dtensor::conv {

inline constexpr const char* kForwardOp = "convolution";
inline constexpr const char* kBackwardOp = "convolution_backward";

/// A "convolution" call and a "convolution_backward" call.
using ForwardCall = detail::WeightedForwardCall<ConvParams>;
using BackwardCall = detail::WeightedBackwardCall<ConvParams>;

}  // namespace dtensor::conv
