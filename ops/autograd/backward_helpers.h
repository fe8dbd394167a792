// Building blocks for the built-in operators' backward functions.
#pragma once

#include <string>
#include <vector>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/registry.h"

namespace dtensor::autograd::detail {

/// The forward call's arguments with `grad_output` in front: the layout of
/// every "<op>_backward" operator whose gradient is for the first argument
/// only (activations, pools, upsample).
std::vector<OpArg> grad_then_forward_args(const DTensor& grad_output, const OpSchema& forward);

/// A backward that dispatches `backward_op` on (grad_output, the forward's
/// arguments...) and returns its result as the gradient of the first DTensor
/// argument (the others, if any, get none).
BackwardFunction via_backward_op(std::string backward_op);

/// The gradient of a reduction to one element: `factor` times the (one
/// element) gradient, everywhere in a tensor of spec `of` (Replicate where
/// `of` is Partial).
DTensor broadcast_scalar_gradient(const DTensor& grad, const DTensorSpec& of, double factor);

/// The gradient flowing into output 0 (zeros-free: callers skip when none).
const DTensor& grad_of_output(const BackwardCall& c, std::size_t i = 0);

}  // namespace dtensor::autograd::detail

namespace dtensor::autograd::detail {

/// The mask a weighted operator's backward computes: what is wanted of
/// (input, weight, bias?), the bias only when the forward had one.
template <class Mask>
Mask wanted(const BackwardCall& c, bool has_bias) {
  Mask m;
  m.input = c.needs_input_grad.at(0);
  m.weight = c.needs_input_grad.at(1);
  m.bias = has_bias && c.needs_input_grad.at(2);
  return m;
}

/// The outputs of a "<op>_backward" computed under `mask` (input, weight,
/// bias, each only when asked), as gradients of (input, weight, bias?).
template <class Mask>
std::vector<std::optional<DTensor>> weighted_grads(const std::vector<DTensor>& outs,
                                                   const Mask& mask, bool has_bias) {
  std::vector<std::optional<DTensor>> g(has_bias ? 3 : 2);
  std::size_t i = 0;
  if (mask.input) g[0] = outs.at(i++);
  if (mask.weight) g[1] = outs.at(i++);
  if (mask.bias) g[2] = outs.at(i++);
  return g;
}

}  // namespace dtensor::autograd::detail
