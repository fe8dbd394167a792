// Activation functions on DTensors, forward and backward, with
// torch.nn.functional's semantics (relu is in pointwise.h). Element-wise:
// any Shard or Replicate placement passes through; a Partial input is reduced
// first (none of them is linear). Each backward takes (grad_output, input),
// is linear in grad_output (a Partial grad_output with a replicated input
// stays Partial) and returns the gradient placed like the propagator's
// choice (the inputs' common placement). bf16 and f16 compute in f32.
// Argument layouts: docs/operators.md.
#pragma once

#include <string_view>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// x > 0 ? x : negative_slope * x.
DTensor leaky_relu(const DTensor& input, double negative_slope = 0.01);
DTensor leaky_relu_backward(const DTensor& grad_output, const DTensor& input,
                            double negative_slope = 0.01);

/// F.gelu's approximate argument.
enum class GeluApproximate { None, Tanh };
std::string_view gelu_approximate_name(GeluApproximate a);
/// none: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2));
/// tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
DTensor gelu(const DTensor& input, GeluApproximate approximate = GeluApproximate::None);
DTensor gelu_backward(const DTensor& grad_output, const DTensor& input,
                      GeluApproximate approximate = GeluApproximate::None);

/// x * sigmoid(x).
DTensor silu(const DTensor& input);
DTensor silu_backward(const DTensor& grad_output, const DTensor& input);

/// 1 / (1 + exp(-x)).
DTensor sigmoid(const DTensor& input);
/// grad_output * s (1 - s), s = sigmoid(input) (PyTorch's sigmoid_backward
/// takes the output; this takes the input, as relu_backward does).
DTensor sigmoid_backward(const DTensor& grad_output, const DTensor& input);

DTensor tanh(const DTensor& input);
/// grad_output * (1 - tanh(input)^2).
DTensor tanh_backward(const DTensor& grad_output, const DTensor& input);

}  // namespace dtensor
