// How a convolution call is spelled as OpSchema arguments, and read back.
//
//   convolution:          input, weight, bias|None, stride, padding, dilation, groups
//   convolution_backward: grad_output, input, weight, stride, padding, dilation, groups, mask
//
// Parameters are expanded to the input's spatial rank before they are
// encoded, so equal calls have equal keys; padding travels as l0,r0,l1,r1,...
// and the mask as {input, weight, bias} flags.
#pragma once

#include <vector>

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/op_schema.h"

namespace dtensor::conv {

inline constexpr const char* kForwardOp = "convolution";
inline constexpr const char* kBackwardOp = "convolution_backward";

std::vector<OpArg> encode_params(const ConvParams& expanded);
/// Reads the parameters starting at argument position `first`.
ConvParams decode_params(const OpSchema& s, std::size_t first);
std::vector<OpArg> encode_mask(const ConvOutputMask& m);
ConvOutputMask decode_mask(const OpSchema& s, std::size_t pos);

}  // namespace dtensor::conv
