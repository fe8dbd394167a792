// What the weighted window operators (convolution, conv_transpose) share
// around their handlers: the public functions' path to dispatch, the operand
// checks every rank runs before anything else, the output metadata, the
// gradients' wrapping, and the registration of the forward and backward
// operators.
//
// `Forward` is the typed call (input, weight, bias, params) and `Backward`
// (grad_output, input, weight, params, mask), as conv_call.h and
// conv_transpose_call.h declare them; every stage reads the call decoded
// once (decoded<Call>); the operator supplies its own shape rules.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/typed_call.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/op_pair.h"
#include "ops/detail/placed_like_input.h"
#include "ops/detail/weighted_call.h"

namespace dtensor::detail {

template <class Forward, class Backward>
struct WeightedOp {
  using Params = decltype(Forward::params);
  const char* component;   // names the operator in error messages
  const char* forward_op;  // registered names
  const char* backward_op;
  const char* output_name;   // "the convolution's output"
  const char* input_layout;  // "[N, C, spatial...]", for the input's rank error
  /// The operator's rules for (input, weight, bias or nullopt, params);
  /// InvalidArgument naming the parameter.
  std::function<void(const Shape&, const Shape&, const std::optional<Shape>&, const Params&)> check;
  std::function<Shape(const Shape& input, const Shape& weight, const Params&)> output_shape;
  std::function<std::vector<ShardingStrategy>(const OpSchema&)> forward_strategies;
  std::function<std::vector<ShardingStrategy>(const OpSchema&)> backward_strategies;
  OpHandler forward_handler;
  OpHandler backward_handler;
};

/// The handler's local gradients (those the mask asks for, in order) as
/// DTensors of the chosen output specs; the input's gradient goes back to
/// the placements of the caller's input.
inline std::vector<DTensor> weighted_gradients(const char* component,
                                               const std::vector<DTensorSpec>& specs,
                                               const std::vector<Tensor>& locals,
                                               const DTensor& input, bool has_input_gradient) {
  std::vector<DTensor> outs;
  for (std::size_t i = 0; i < locals.size(); ++i) {
    const DTensorSpec& spec = specs[i];
    DTENSOR_CHECK_ARG(locals[i].shape() == spec.local_shape(), component,
                      "internal: gradient {} has local shape {} but {} needs {}", i,
                      shape_str(locals[i].shape()), spec.str(), shape_str(spec.local_shape()));
    outs.emplace_back(locals[i], spec);
  }
  if (has_input_gradient) outs[0] = placed_like_input(outs[0], input);
  return outs;
}

/// Registers the forward and backward operators with their checks, output
/// metadata, strategies, autograd backward and handlers (which communicate
/// only through the call's group: HandlerOptions::defers_agreement).
template <class Forward, class Backward>
void register_weighted_op(const WeightedOp<Forward, Backward>& op) {
  OpDef fwd;
  fwd.name = op.forward_op;
  fwd.validate = [op](const OpSchema& s) {
    const Forward& c = decoded<Forward>(s);
    DTENSOR_CHECK_ARG(c.weight.dtype() == c.input.dtype(), op.component,
                      "weight: dtype {} differs from the input's {}", dtype_name(c.weight.dtype()),
                      dtype_name(c.input.dtype()));
    std::optional<Shape> b;
    if (c.bias) {
      b = c.bias->shape();
      DTENSOR_CHECK_ARG(c.bias->dtype() == c.input.dtype(), op.component,
                        "bias: dtype {} differs from the input's {}", dtype_name(c.bias->dtype()),
                        dtype_name(c.input.dtype()));
    }
    op.check(c.input.shape(), c.weight.shape(), b, c.params);
  };
  fwd.output_meta = [op](const OpSchema& s) {
    const Forward& c = decoded<Forward>(s);
    return std::vector<TensorMeta>{
        {op.output_shape(c.input.shape(), c.weight.shape(), c.params), c.input.dtype()}};
  };
  fwd.strategies = op.forward_strategies;
  fwd.backward = autograd::detail::weighted_backward<Forward, Backward>(op.backward_op);

  OpDef bwd;
  bwd.name = op.backward_op;
  bwd.validate = [op](const OpSchema& s) {
    const Backward& c = decoded<Backward>(s);
    DTENSOR_CHECK_ARG(
        c.weight.dtype() == c.input.dtype() && c.grad_output.dtype() == c.input.dtype(),
        op.component,
        "grad_output: dtypes of grad_output ({}), input ({}) and weight ({}) must match",
        dtype_name(c.grad_output.dtype()), dtype_name(c.input.dtype()),
        dtype_name(c.weight.dtype()));
    op.check(c.input.shape(), c.weight.shape(), std::nullopt, c.params);
    const Shape expect = op.output_shape(c.input.shape(), c.weight.shape(), c.params);
    DTENSOR_CHECK_ARG(c.grad_output.shape() == expect, op.component,
                      "grad_output: shape {} but {} is {}", shape_str(c.grad_output.shape()),
                      op.output_name, shape_str(expect));
  };
  bwd.output_meta = [op](const OpSchema& s) {
    const Backward& c = decoded<Backward>(s);
    std::vector<TensorMeta> out;
    if (c.mask.input) out.push_back({c.input.shape(), c.input.dtype()});
    if (c.mask.weight) out.push_back({c.weight.shape(), c.input.dtype()});
    // The bias has one element per output channel: dim 1 of the output.
    if (c.mask.bias)
      out.push_back(
          {{op.output_shape(c.input.shape(), c.weight.shape(), c.params)[1]}, c.input.dtype()});
    return out;
  };
  bwd.strategies = op.backward_strategies;
  register_op_pair({std::move(fwd), std::move(bwd), op.forward_handler, op.backward_handler});
}

/// Registers `op` while static objects are constructed (at namespace scope:
/// `const WeightedOpRegistration registration{kConv};`).
struct WeightedOpRegistration {
  template <class Forward, class Backward>
  explicit WeightedOpRegistration(const WeightedOp<Forward, Backward>& op) {
    register_weighted_op(op);
  }
};

/// The parameters expanded to the input's spatial dims (1 to 3).
template <class Forward, class Backward>
typename WeightedOp<Forward, Backward>::Params expanded_for(const WeightedOp<Forward, Backward>& op,
                                                            const DTensor& input,
                                                            const decltype(Forward::params)& p) {
  check_weighted_input(input.shape(), op.component, op.input_layout);
  return p.expanded(input.spec().ndim() - 2);
}

/// The public forward (convolution(), conv_transpose()): the parameters
/// expanded (a failure agreed on by every rank first), then dispatched.
template <class Forward, class Backward>
DTensor call_weighted_forward(const WeightedOp<Forward, Backward>& op, const DTensor& input,
                              const DTensor& weight, const std::optional<DTensor>& bias,
                              const decltype(Forward::params)& params) {
  const auto p = agreed_front_end(input.mesh(), op.forward_op,
                                  [&] { return expanded_for(op, input, params); });
  return dispatch(op.forward_op, Forward::Fields::encode(input, weight, bias ? &*bias : nullptr, p))
      .at(0);
}

/// The public backward: the gradients `mask` asks for (none: no call).
template <class Forward, class Backward>
ConvGrads call_weighted_backward(const WeightedOp<Forward, Backward>& op,
                                 const DTensor& grad_output, const DTensor& input,
                                 const DTensor& weight, const decltype(Forward::params)& params,
                                 const ConvOutputMask& mask) {
  ConvGrads g;
  if (!mask.input && !mask.weight && !mask.bias) return g;
  const auto p = agreed_front_end(input.mesh(), op.backward_op,
                                  [&] { return expanded_for(op, input, params); });
  auto outs =
      dispatch(op.backward_op, Backward::Fields::encode(grad_output, input, weight, p, mask));
  std::size_t i = 0;
  if (mask.input) g.grad_input = outs.at(i++);
  if (mask.weight) g.grad_weight = outs.at(i++);
  if (mask.bias) g.grad_bias = outs.at(i++);
  return g;
}

}  // namespace dtensor::detail
