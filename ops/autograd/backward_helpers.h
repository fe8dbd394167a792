// Building blocks for the built-in operators' backward functions.
#pragma once

#include <string>
#include <vector>

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/typed_call.h"

namespace dtensor::autograd::detail {

/// The forward call's arguments with `grad_output` in front: the layout of
/// every "<op>_backward" operator whose gradient is for the first argument
/// only (activations, pools, upsample).
std::vector<OpArg> grad_then_forward_args(const DTensor& grad_output, const OpSchema& forward);

/// A backward that dispatches `backward_op` on (grad_output, the forward's
/// arguments...) and returns its result as the gradient of the first DTensor
/// argument (the others, if any, get none).
BackwardFunction via_backward_op(std::string backward_op);

/// The placements a gradient takes: those of the tensor it is the gradient
/// of, but Replicate where that tensor is Partial (every partial term gets
/// the whole gradient).
Placements gradient_placements(const DTensorSpec& of);

/// The gradient of a reduction to one element: `factor` times the (one
/// element) gradient, everywhere in a tensor of spec `of` (Replicate where
/// `of` is Partial).
DTensor broadcast_scalar_gradient(const DTensor& grad, const DTensorSpec& of, double factor);

/// The gradient flowing into output 0 (zeros-free: callers skip when none).
const DTensor& grad_of_output(const BackwardCall& c, std::size_t i = 0);

}  // namespace dtensor::autograd::detail

namespace dtensor::autograd::detail {

/// The backward of a weighted operator (convolution, conv_transpose):
/// reads the forward as the typed call `Forward` (input, weight, bias,
/// params), asks `backward_op` (the typed call `Backward`) for the wanted
/// gradients only, and returns them as those of (input, weight, bias?).
template <class Forward, class Backward>
BackwardFunction weighted_backward(const char* backward_op) {
  return [backward_op](const BackwardCall& c) {
    const Forward& f = decoded<Forward>(c.forward);
    ConvOutputMask mask;
    mask.input = c.needs_input_grad.at(0);
    mask.weight = c.needs_input_grad.at(1);
    mask.bias = f.bias != nullptr && c.needs_input_grad.at(2);
    std::vector<std::optional<DTensor>> g(c.needs_input_grad.size());
    if (!mask.input && !mask.weight && !mask.bias) return g;
    const auto outs = dispatch(backward_op, Backward::Fields::encode(grad_of_output(c), f.input,
                                                                     f.weight, f.params, mask));
    std::size_t i = 0;
    if (mask.input) g[0] = outs.at(i++);
    if (mask.weight) g[1] = outs.at(i++);
    if (mask.bias) g[2] = outs.at(i++);
    return g;
  };
}

}  // namespace dtensor::autograd::detail
