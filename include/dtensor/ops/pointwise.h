// Element-wise operators and reductions on DTensors: enough for a loss and a
// training step. Each goes through dispatch() like a user's operator would.
#pragma once

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// a + b (same shape and dtype).
DTensor add(const DTensor& a, const DTensor& b);
/// a * b element-wise (same shape and dtype).
DTensor mul(const DTensor& a, const DTensor& b);
/// a * s.
DTensor scale(const DTensor& a, double s);
/// max(a, 0).
DTensor relu(const DTensor& a);
/// grad_output * (input > 0): the gradient of relu.
DTensor relu_backward(const DTensor& grad_output, const DTensor& input);
/// The sum of all elements, a 0-d DTensor (Partial(sum) where the input was sharded).
DTensor sum(const DTensor& a);
/// The mean of all elements, a 0-d DTensor.
DTensor mean(const DTensor& a);

}  // namespace dtensor
