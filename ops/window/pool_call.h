// How the pools' calls are spelled as OpSchema arguments: typed calls
// (dtensor/ops/typed_call.h) whose fields are named once, decoded once per
// call and handed to every stage.
//
//   max_pool | avg_pool:                   input, kernel, stride, padding (l0,r0,...),
//                                          dilation, ceil_mode, count_include_pad,
//                                          divisor_override (None: none)
//   max_pool_backward | avg_pool_backward: grad_output, then the same
//   adaptive_{avg,max}_pool:               input, output_size
//   adaptive_{avg,max}_pool_backward:      grad_output, input, output_size
//
// Parameters are expanded to the input's spatial rank before they are
// encoded, so equal calls have equal keys.
#pragma once

#include "dtensor/ops/typed_call.h"
#include "dtensor/ops/window_ops.h"

namespace dtensor {

/// PoolParams as seven arguments: kernel, stride, padding pairs (flat),
/// dilation, ceil_mode, count_include_pad, divisor_override (None: none).
template <>
struct ArgCodec<PoolParams>
    : MembersCodec<PoolParams, Member<&PoolParams::kernel, "kernel">,
                   Member<&PoolParams::stride, "stride">, Member<&PoolParams::padding, "padding">,
                   Member<&PoolParams::dilation, "dilation">,
                   Member<&PoolParams::ceil_mode, "ceil_mode">,
                   Member<&PoolParams::count_include_pad, "count_include_pad">,
                   Member<&PoolParams::divisor_override, "divisor_override">> {};

}  // namespace dtensor

namespace dtensor::window {

/// "max_pool" / "avg_pool".
struct SlidingPoolCall {
  const DTensor& input;
  PoolParams params;
  using Fields = CallFields<const DTensor&, PoolParams>;
  static constexpr Fields::Names names{"input", "params"};
};

/// "max_pool_backward" / "avg_pool_backward".
struct SlidingPoolBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  PoolParams params;
  using Fields = CallFields<const DTensor&, const DTensor&, PoolParams>;
  static constexpr Fields::Names names{"grad_output", "input", "params"};
};

/// "adaptive_avg_pool" / "adaptive_max_pool".
struct AdaptivePoolCall {
  const DTensor& input;
  IntList output_size;
  using Fields = CallFields<const DTensor&, IntList>;
  static constexpr Fields::Names names{"input", "output_size"};
};

/// "adaptive_avg_pool_backward" / "adaptive_max_pool_backward".
struct AdaptivePoolBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  IntList output_size;
  using Fields = CallFields<const DTensor&, const DTensor&, IntList>;
  static constexpr Fields::Names names{"grad_output", "input", "output_size"};
};

}  // namespace dtensor::window
