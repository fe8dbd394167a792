// Element-wise mathematical functions of one DTensor, forward and backward,
// with torch's semantics. Any Shard or Replicate placement passes through;
// neg, being linear, also keeps a Partial(sum) input Partial, the others
// reduce it first. Each backward takes (grad_output, input, parameters...),
// is linear in grad_output ((Partial, Replicate) -> Partial) and is what
// autograd runs. bf16 and f16 compute in f32. Placements and dtypes:
// docs/operators.md.
#pragma once

#include <optional>

#include "dtensor/ops/kernels/elementwise_math.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor {

// exp, natural_log (torch.log), sqrt, rsqrt (1 / sqrt), neg, abs, square
// (input * input) and their backward operators, declared from the list of
// plain unary functions (DTENSOR_PLAIN_UNARY_FUNCTIONS, in
// dtensor/ops/kernels/elementwise_math.h beside their formulas):
//   DTensor FUNCTION(const DTensor& input);
//   DTensor OP_backward(const DTensor& grad_output, const DTensor& input);
#define DTENSOR_DECLARE_PLAIN_UNARY(NAME, FUNCTION, OP, POSITIVE, LINEAR) \
  DTensor FUNCTION(const DTensor& input);                                 \
  DTensor OP##_backward(const DTensor& grad_output, const DTensor& input);
DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_DECLARE_PLAIN_UNARY)
#undef DTENSOR_DECLARE_PLAIN_UNARY

/// min(max(input, min), max) with either bound optional (at least one);
/// NaN stays NaN. The gradient passes where min <= input <= max.
DTensor clamp(const DTensor& input, std::optional<double> min, std::optional<double> max);
/// input ^ exponent; the gradient is exponent * input^(exponent - 1), 0 when
/// the exponent is 0.
DTensor pow(const DTensor& input, double exponent);

/// The gradients: grad_output times the derivative at `input`.
DTensor clamp_backward(const DTensor& grad_output, const DTensor& input, std::optional<double> min,
                       std::optional<double> max);
DTensor pow_backward(const DTensor& grad_output, const DTensor& input, double exponent);

}  // namespace dtensor
