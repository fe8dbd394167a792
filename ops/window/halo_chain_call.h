// How a halo chain's call is spelled as OpSchema arguments: typed calls
// (dtensor/ops/typed_call.h) whose fields are named once, decoded once per
// call and handed to every stage.
//
//   halo_chain:          input, layers...
//   halo_chain_backward: grad_output, input, input_grad, layers...
//
// Each layer is nine arguments: "conv", weight, bias|None, padding (left,
// right per spatial dim, one flat list), dilation, groups, stride; or "group_norm",
// num_groups, eps, weight|None, bias|None, relu; or "batch_norm",
// weight|None, bias|None, running_mean|None, running_var|None, training,
// momentum, eps, relu; or "activation", op, negative_slope, approximate
// ("none" | "tanh"); or "max_pool" | "avg_pool", kernel, padding (flat, as a
// convolution's), dilation, count_include_pad, divisor_override|None, stride,
// ceil_mode; or "upsample", mode ("nearest" | "linear"), size (empty when
// by scale factor), align_corners, the number of scale factors (0, 1 or one
// per spatial dim), then three scale factors (0.0 past that number); or
// "conv_transpose", weight, bias|None, stride, padding, output_padding,
// dilation, groups (lists spelled out for the weight's spatial dims); the
// rest None (the width is every layer's; a pool's lists are
// spelled out for the input's spatial dims). A convolution's kind names its
// padding mode: "conv" (zeros), "conv_reflect", "conv_replicate",
// "conv_circular".
#pragma once

#include <string_view>
#include <vector>

#include "dtensor/ops/halo_chain.h"
#include "dtensor/ops/typed_call.h"

namespace dtensor {

/// One layer of a chain as nine arguments. A convolution's lists are spelled
/// out for its weight's spatial dims, so equal chains have equal keys.
template <>
struct ArgCodec<ChainLayer> {
  using Arg = const ChainLayer&;
  static constexpr std::size_t width = 9;
  static void encode(std::vector<OpArg>& out, const ChainLayer& layer);
  static ChainLayer decode(const OpSchema& s, std::size_t at, std::string_view field);

 private:
  // The layer's own arguments (encode pads them to the width).
  static void encode_fields(std::vector<OpArg>& out, const ChainLayer& layer);
};

}  // namespace dtensor

namespace dtensor::halo {

inline constexpr const char* kForwardOp = "halo_chain";
inline constexpr const char* kBackwardOp = "halo_chain_backward";

/// A "halo_chain" call.
struct ChainCall {
  const DTensor& input;
  ArgTail<ChainLayer> layers;
  using Fields = CallFields<const DTensor&, ArgTail<ChainLayer>>;
  static constexpr Fields::Names names{"input", "layers"};
};

/// A "halo_chain_backward" call: `input_grad` says whether the input's
/// gradient is wanted (when not, the first convolution's backward-data and
/// the exchange are skipped).
struct ChainBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  bool input_grad;
  ArgTail<ChainLayer> layers;
  using Fields = CallFields<const DTensor&, const DTensor&, bool, ArgTail<ChainLayer>>;
  static constexpr Fields::Names names{"grad_output", "input", "input_grad", "layers"};
};

}  // namespace dtensor::halo
