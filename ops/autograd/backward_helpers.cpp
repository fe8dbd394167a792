#include "ops/autograd/backward_helpers.h"

#include "dtensor/core/errors.h"

namespace dtensor::autograd::detail {

std::vector<OpArg> grad_then_forward_args(const DTensor& grad_output, const OpSchema& forward) {
  std::vector<OpArg> args;
  args.reserve(forward.size() + 1);
  args.emplace_back(grad_output);
  args.insert(args.end(), forward.args().begin(), forward.args().end());
  return args;
}

const DTensor& grad_of_output(const BackwardCall& c, std::size_t i) {
  DTENSOR_CHECK_ARG(i < c.grad_outputs.size() && c.grad_outputs[i].has_value(), "autograd",
                    "{}: no gradient for output {}", c.forward.op(), i);
  return *c.grad_outputs[i];
}

BackwardFunction via_backward_op(std::string backward_op) {
  return [backward_op](const BackwardCall& c) {
    std::vector<std::optional<DTensor>> grads(c.needs_input_grad.size());
    if (c.needs_input_grad.at(0))
      grads[0] = dispatch(backward_op, grad_then_forward_args(grad_of_output(c), c.forward)).at(0);
    return grads;
  };
}

Placements gradient_placements(const DTensorSpec& of) {
  Placements p = of.placements();
  for (auto& x : p)
    if (x.is_partial()) x = Replicate();
  return p;
}

DTensor broadcast_scalar_gradient(const DTensor& grad, const DTensorSpec& of, double factor) {
  Placements replicated(grad.mesh().ndim(), Replicate());
  const DTensor g =
      grad.placements() == replicated ? grad : grad.redistribute(grad.mesh(), replicated);
  const double value = g.to_local().item_flat(0) * factor;
  const DTensorSpec spec(of.mesh(), gradient_placements(of), of.shape(), of.dtype());
  return DTensor(Tensor::full(spec.local_shape(), value, of.dtype(), g.to_local().device()), spec);
}

}  // namespace dtensor::autograd::detail
