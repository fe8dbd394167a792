// Naive f64 oracles of the tensor API's element-wise operators: the binary
// ones with NumPy broadcasting (add, sub, mul, div, maximum, minimum) and the
// unary functions (exp, log, sqrt, rsqrt, neg, abs, square, clamp, pow),
// forward and gradients, with PyTorch's derivative conventions (maximum and
// minimum split a tie's gradient in half; abs' gradient at 0 is 0; clamp's
// passes where min <= x <= max; pow's is 0 for the exponent 0).
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "dtensor/core/tensor.h"

namespace dtensor::reference {

/// op(a, b) with b broadcast to a's shape; f64.
Tensor ref_binary_forward(std::string_view op, const Tensor& a, const Tensor& b);
/// The gradients of a and b given the output's; b's summed to b's shape.
std::pair<Tensor, Tensor> ref_binary_grads(std::string_view op, const Tensor& grad_output,
                                           const Tensor& a, const Tensor& b);

/// The parameters of the unary functions: clamp's bounds, pow's exponent.
struct RefUnary {
  std::optional<double> min, max;
  double exponent = 1.0;
};
Tensor ref_unary_forward(std::string_view op, const Tensor& x, const RefUnary& p);
Tensor ref_unary_grad_input(std::string_view op, const Tensor& grad_output, const Tensor& x,
                            const RefUnary& p);

}  // namespace dtensor::reference
