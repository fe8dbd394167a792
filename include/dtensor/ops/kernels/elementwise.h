// What the kernels of the element-wise functions of one tensor and of the
// activations (exp ... pow, leaky_relu ... tanh, and their *_backward) read
// from their call besides the tensors: the (s, t) parameters the shared
// formulas of elementwise_math.h take, decoded from the call once, in one
// place, for every backend.
#pragma once

#include "dtensor/ops/kernels/elementwise_math.h"
#include "dtensor/ops/registry.h"

namespace dtensor::kernels {

struct ElementwiseParams {
  /// Whether the call is a backward (grad_output, input, ...) rather than a
  /// forward (input, ...).
  bool backward = false;
  /// clamp: the bounds (an absent min is -inf, an absent max +inf); pow: the
  /// exponent in s; leaky_relu: the slope in s; gelu: t = 1 for the tanh
  /// approximation, else 0; 0 for the rest.
  double s = 0, t = 0;
};

/// The parameters of an element-wise or activation call (its operator's
/// argument layout, docs/operators.md).
ElementwiseParams elementwise_params(const OpSchema& schema);

}  // namespace dtensor::kernels
