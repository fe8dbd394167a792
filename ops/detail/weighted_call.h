// The typed calls of the weighted window operators (convolution,
// conv_transpose), which differ only in their parameters: the forward
// (input, weight, bias|None, params) and the backward (grad_output, input,
// weight, params, mask), fields named once (dtensor/ops/typed_call.h); and
// the first checks of their operands (the input's rank and extents, the
// weight's rank, stride and dilation), whose messages name the operator's
// own layouts.
#pragma once

#include <cstdint>
#include <vector>

#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/typed_call.h"
#include "ops/detail/output_mask_codec.h"

namespace dtensor::detail {

/// How a weighted operator is named, in error messages and in the registry.
struct WeightedOpNames {
  const char* component;   // names the operator in error messages
  const char* forward_op;  // registered names
  const char* backward_op;
  const char* output_name;    // "the convolution's output"
  const char* input_layout;   // "[N, C, spatial...]", for the input's rank error
  const char* weight_layout;  // "[OC, C/groups, k...]", for the weight's
};

template <class Params>
struct WeightedForwardCall {
  const DTensor& input;
  const DTensor& weight;
  const DTensor* bias;  // null: none
  Params params;
  using Fields = CallFields<const DTensor&, const DTensor&, const DTensor*, Params>;
  static constexpr typename Fields::Names names{"input", "weight", "bias", "params"};
};

template <class Params>
struct WeightedBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  const DTensor& weight;
  Params params;
  ConvOutputMask mask;
  using Fields = CallFields<const DTensor&, const DTensor&, const DTensor&, Params, ConvOutputMask>;
  static constexpr typename Fields::Names names{"grad_output", "input", "weight", "params", "mask"};
};

/// The input is `layout` ("[N, C, spatial...]") with 1 to 3 spatial dims
/// and no negative extent; InvalidArgument naming "input" otherwise.
inline void check_weighted_input(const Shape& input, const char* component, const char* layout) {
  const auto rank = static_cast<std::int64_t>(input.size());
  DTENSOR_CHECK_ARG(rank >= 3 && rank <= 5, component,
                    "input: expected {} with 1 to 3 spatial dims, got shape {}", layout,
                    shape_str(input));
  for (auto e : input)
    DTENSOR_CHECK_ARG(e >= 0, component, "input: negative extent in shape {}", shape_str(input));
}

/// The input as check_weighted_input() has it, and the weight of its rank:
/// the weight says how many spatial dims the operator has (a Conv2d's 4-d
/// weight against an unbatched 3-d input is named as such, before the
/// parameters are read for the input's 1 spatial dim).
inline void check_weighted_operands(const Shape& input, const Shape& weight, const char* component,
                                    const char* input_layout, const char* weight_layout) {
  check_weighted_input(input, component, input_layout);
  DTENSOR_CHECK_ARG(input.size() + 1 != weight.size(), component,
                    "input: shape {} has rank {} where the weight {} asks for {} ({}: an "
                    "unbatched input needs its batch dim)",
                    shape_str(input), input.size(), shape_str(weight), weight.size(), input_layout);
  DTENSOR_CHECK_ARG(weight.size() == input.size(), component,
                    "weight: shape {} has rank {} but the input {} has rank {} (expected {})",
                    shape_str(weight), weight.size(), shape_str(input), input.size(),
                    weight_layout);
}

/// The first checks of a weighted operator's operands, alike for both: the
/// input (`input_layout`), the weight's rank (`weight_layout` in the
/// message), then stride and dilation >= 1; returns the parameters expanded
/// to the input's spatial dims for the operator's own checks.
template <class Params>
Params checked_weighted_params(const Shape& input, const Shape& weight, const Params& params,
                               const char* component, const char* input_layout,
                               const char* weight_layout);

/// stride and dilation >= 1 in every spatial dim; InvalidArgument naming
/// the one that is not.
inline void check_steps(const std::vector<std::int64_t>& stride,
                        const std::vector<std::int64_t>& dilation, const char* component) {
  for (auto s : stride)
    DTENSOR_CHECK_ARG(s >= 1, component, "stride: must be >= 1 in every spatial dim, got [{}]",
                      fmt::join(stride, ", "));
  for (auto d : dilation)
    DTENSOR_CHECK_ARG(d >= 1, component, "dilation: must be >= 1 in every spatial dim, got [{}]",
                      fmt::join(dilation, ", "));
}

template <class Params>
Params checked_weighted_params(const Shape& input, const Shape& weight, const Params& params,
                               const char* component, const char* input_layout,
                               const char* weight_layout) {
  check_weighted_operands(input, weight, component, input_layout, weight_layout);
  Params p = params.expanded(static_cast<std::int64_t>(input.size()) - 2);
  check_steps(p.stride, p.dilation, component);
  return p;
}

}  // namespace dtensor::detail
