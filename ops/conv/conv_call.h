// How a convolution call is spelled as OpSchema arguments, and the typed
// struct every part of the convolution reads it back as (decoded once per
// use, never by argument position elsewhere).
//
//   convolution:          input, weight, bias|None, stride, padding, dilation, groups, padding_mode
//   convolution_backward: grad_output, input, weight, stride, padding, dilation, groups,
//                         padding_mode, mask
//
// Parameters are expanded to the input's spatial rank before they are
// encoded, so equal calls have equal keys; padding travels as l0,r0,l1,r1,...,
// the padding mode by name and the mask as {input, weight, bias} flags.
#pragma once

#include <vector>

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/op_schema.h"

namespace dtensor::conv {

inline constexpr const char* kForwardOp = "convolution";
inline constexpr const char* kBackwardOp = "convolution_backward";

/// A "convolution" call, decoded.
struct ForwardCall {
  const DTensor& input;
  const DTensor& weight;
  bool has_bias;
  ConvParams params;
  static ForwardCall decode(const OpSchema& s);
  static std::vector<OpArg> encode(const DTensor& input, const DTensor& weight,
                                   const std::optional<DTensor>& bias, const ConvParams& expanded);
};

/// A "convolution_backward" call, decoded.
struct BackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  const DTensor& weight;
  ConvParams params;
  ConvOutputMask mask;
  static BackwardCall decode(const OpSchema& s);
  static std::vector<OpArg> encode(const DTensor& grad_output, const DTensor& input,
                                   const DTensor& weight, const ConvParams& expanded,
                                   const ConvOutputMask& mask);
};

}  // namespace dtensor::conv
