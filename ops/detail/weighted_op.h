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
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/typed_call.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/op_pair.h"
#include "ops/detail/placed_like_input.h"
#include "ops/detail/weighted_call.h"

namespace dtensor::detail {

/// What a weighted operator's handler starts from, made by the generic path:
/// the call decoded once, the chosen sharding, the DTensors redistributed to
/// it (in the call's order: input, weight[, bias] or grad_output, input,
/// weight), and the local convolution kernels of their device and dtype,
/// looked up on every rank before any exchange so that a missing kernel
/// fails them all alike.
template <class Call>
struct WeightedOperands {
  const Call& call;
  const OutputSharding& sharding;
  std::vector<DTensor> tensors;
  std::shared_ptr<LocalConvKernels> kernels;
};

/// A weighted operator's own rules and stages, in this order; the generic
/// path (register_weighted_op, the public functions below) does the rest.
/// The forward handler returns this rank's output, the backward one the
/// local gradients the mask asks for (in order); the generic path wraps
/// them with the chosen output specs.
template <class Forward, class Backward>
struct WeightedOp {
  using Params = decltype(Forward::params);
  WeightedOpNames names;
  /// The operator's rules for (input, weight, bias or nullopt, params);
  /// InvalidArgument naming the parameter.
  std::function<void(const Shape&, const Shape&, const std::optional<Shape>&, const Params&)> check;
  std::function<Shape(const Shape& input, const Shape& weight, const Params&)> output_shape;
  std::function<std::vector<ShardingStrategy>(const OpSchema&)> forward_strategies;
  std::function<std::vector<ShardingStrategy>(const OpSchema&)> backward_strategies;
  std::function<Tensor(OpCall&, const WeightedOperands<Forward>&)> forward_handler;
  std::function<std::vector<Tensor>(OpCall&, const WeightedOperands<Backward>&)> backward_handler;
};

/// The operands of `call` as a handler of `Call` takes them.
template <class Call>
WeightedOperands<Call> weighted_operands(OpCall& call) {
  const Call& c = decoded<Call>(call.schema());
  // Before the redistribution, which keeps the input's device and dtype.
  auto kernels = local_conv_kernels(c.input.to_local().device(), c.input.dtype());
  return {c, call.sharding(), call.redistributed_inputs(), std::move(kernels)};
}

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
  fwd.name = op.names.forward_op;
  fwd.validate = [op](const OpSchema& s) {
    const Forward& c = decoded<Forward>(s);
    DTENSOR_CHECK_ARG(c.weight.dtype() == c.input.dtype(), op.names.component,
                      "weight: dtype {} differs from the input's {}", dtype_name(c.weight.dtype()),
                      dtype_name(c.input.dtype()));
    std::optional<Shape> b;
    if (c.bias) {
      b = c.bias->shape();
      DTENSOR_CHECK_ARG(c.bias->dtype() == c.input.dtype(), op.names.component,
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
  fwd.backward = autograd::detail::weighted_backward<Forward, Backward>(op.names.backward_op);

  OpDef bwd;
  bwd.name = op.names.backward_op;
  bwd.validate = [op](const OpSchema& s) {
    const Backward& c = decoded<Backward>(s);
    DTENSOR_CHECK_ARG(
        c.weight.dtype() == c.input.dtype() && c.grad_output.dtype() == c.input.dtype(),
        op.names.component,
        "grad_output: dtypes of grad_output ({}), input ({}) and weight ({}) must match",
        dtype_name(c.grad_output.dtype()), dtype_name(c.input.dtype()),
        dtype_name(c.weight.dtype()));
    op.check(c.input.shape(), c.weight.shape(), std::nullopt, c.params);
    const Shape expect = op.output_shape(c.input.shape(), c.weight.shape(), c.params);
    DTENSOR_CHECK_ARG(c.grad_output.shape() == expect, op.names.component,
                      "grad_output: shape {} but {} is {}", shape_str(c.grad_output.shape()),
                      op.names.output_name, shape_str(expect));
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
  OpHandler forward_handler = [op](OpCall& call) {
    const auto in = weighted_operands<Forward>(call);
    const DTensorSpec& spec = in.sharding.output_specs.at(0);
    const Tensor y = op.forward_handler(call, in);
    DTENSOR_CHECK_ARG(y.shape() == spec.local_shape(), op.names.component,
                      "internal: local output {} but the output spec {} needs {}",
                      shape_str(y.shape()), spec.str(), shape_str(spec.local_shape()));
    return std::vector<DTensor>{DTensor(y, spec)};
  };
  OpHandler backward_handler = [op](OpCall& call) {
    const auto in = weighted_operands<Backward>(call);
    return weighted_gradients(op.names.component, in.sharding.output_specs,
                              op.backward_handler(call, in), in.call.input, in.call.mask.input);
  };
  register_op_pair(
      {std::move(fwd), std::move(bwd), std::move(forward_handler), std::move(backward_handler)});
}

/// A weighted operator registered while static objects are constructed: at
/// namespace scope, `const WeightedOpRegistration<ForwardCall, BackwardCall>
/// kConv{{kNames, check, ...}};`, whose `op` the public functions take.
template <class Forward, class Backward>
struct WeightedOpRegistration {
  explicit WeightedOpRegistration(WeightedOp<Forward, Backward> o) : op(std::move(o)) {
    register_weighted_op(op);
  }
  WeightedOp<Forward, Backward> op;
};

/// The parameters expanded to the input's spatial dims (1 to 3).
template <class Forward, class Backward>
typename WeightedOp<Forward, Backward>::Params expanded_for(const WeightedOp<Forward, Backward>& op,
                                                            const DTensor& input,
                                                            const DTensor& weight,
                                                            const decltype(Forward::params)& p) {
  check_weighted_operands(input.shape(), weight.shape(), op.names.component, op.names.input_layout,
                          op.names.weight_layout);
  return p.expanded(input.spec().ndim() - 2);
}

/// The public forward (convolution(), conv_transpose()): the parameters
/// expanded (a failure agreed on by every rank first), then dispatched.
template <class Forward, class Backward>
DTensor call_weighted_forward(const WeightedOp<Forward, Backward>& op, const DTensor& input,
                              const DTensor& weight, const std::optional<DTensor>& bias,
                              const decltype(Forward::params)& params) {
  const auto p = agreed_front_end(input.mesh(), op.names.forward_op,
                                  [&] { return expanded_for(op, input, weight, params); });
  return dispatch(op.names.forward_op,
                  Forward::Fields::encode(input, weight, bias ? &*bias : nullptr, p))
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
  const auto p = agreed_front_end(input.mesh(), op.names.backward_op,
                                  [&] { return expanded_for(op, input, weight, params); });
  auto outs =
      dispatch(op.names.backward_op, Backward::Fields::encode(grad_output, input, weight, p, mask));
  std::size_t i = 0;
  if (mask.input) g.grad_input = outs.at(i++);
  if (mask.weight) g.grad_weight = outs.at(i++);
  if (mask.bias) g.grad_bias = outs.at(i++);
  return g;
}

}  // namespace dtensor::detail
