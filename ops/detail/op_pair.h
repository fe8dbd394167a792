// One operator and its backward, registered together: the one registration
// path of every family with a forward/backward pair (pools, pad, upsample,
// the normalisations, cat, linear, and the weighted operators through
// register_weighted_op). The pair's OpDefs carry the call's stages; the
// handlers run on the call's redistributed inputs.
#pragma once

#include "dtensor/core/errors.h"
#include "dtensor/ops/registry.h"
#include "ops/autograd/backward_helpers.h"

namespace dtensor::detail {

struct OpPair {
  OpDef forward;  // its autograd rule: calling `backward` unless given
  OpDef backward;
  OpHandler forward_handler;
  OpHandler backward_handler;
  /// Every built-in pair defers dispatch's agreement check: a window
  /// operator's travels with its first message, a local one's is confirmed
  /// after its compute (or by redistributing its inputs).
  HandlerOptions options{.defers_agreement = true};
};

/// Registers both definitions and both handlers. Without a rule of its own
/// the forward's gradient is the backward operator called with the output's
/// gradient first, then the forward's arguments.
inline void register_op_pair(OpPair pair) {
  if (!pair.forward.backward)
    pair.forward.backward = autograd::detail::via_backward_op(pair.backward.name);
  const std::string forward_name = pair.forward.name, backward_name = pair.backward.name;
  register_op(std::move(pair.forward));
  register_op_handler(forward_name, std::move(pair.forward_handler), false, pair.options);
  register_op(std::move(pair.backward));
  register_op_handler(backward_name, std::move(pair.backward_handler), false, pair.options);
}

/// What every backward's validate checks of grad_output: the input's dtype,
/// and the forward's output shape `expect` (`output` names it: "the pool's
/// output").
inline void check_grad_output(const char* component, const DTensor& grad_output,
                              const DTensor& input, const Shape& expect, const char* output) {
  DTENSOR_CHECK_ARG(grad_output.dtype() == input.dtype(), component,
                    "grad_output: dtype {} differs from the input's {}",
                    dtype_name(grad_output.dtype()), dtype_name(input.dtype()));
  DTENSOR_CHECK_ARG(grad_output.shape() == expect, component, "grad_output: shape {} but {} is {}",
                    shape_str(grad_output.shape()), output, shape_str(expect));
}

}  // namespace dtensor::detail
