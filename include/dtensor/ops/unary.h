// Element-wise mathematical functions of one DTensor, forward and backward,
// with torch's semantics. Any Shard or Replicate placement passes through;
// neg, being linear, also keeps a Partial(sum) input Partial, the others
// reduce it first. Each backward takes (grad_output, input, parameters...),
// is linear in grad_output ((Partial, Replicate) -> Partial) and is what
// autograd runs. bf16 and f16 compute in f32. Placements and dtypes:
// docs/operators.md.
#pragma once

#include <optional>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

DTensor exp(const DTensor& input);
/// The natural logarithm (torch.log; `log` names the logging namespace here).
DTensor natural_log(const DTensor& input);
DTensor sqrt(const DTensor& input);
/// 1 / sqrt(input).
DTensor rsqrt(const DTensor& input);
DTensor neg(const DTensor& input);
/// |input|; its gradient at 0 is 0 (torch's sgn).
DTensor abs(const DTensor& input);
/// input * input.
DTensor square(const DTensor& input);
/// min(max(input, min), max) with either bound optional (at least one);
/// NaN stays NaN. The gradient passes where min <= input <= max.
DTensor clamp(const DTensor& input, std::optional<double> min, std::optional<double> max);
/// input ^ exponent; the gradient is exponent * input^(exponent - 1), 0 when
/// the exponent is 0.
DTensor pow(const DTensor& input, double exponent);

/// The gradients: grad_output times the derivative at `input`.
DTensor exp_backward(const DTensor& grad_output, const DTensor& input);
DTensor log_backward(const DTensor& grad_output, const DTensor& input);
DTensor sqrt_backward(const DTensor& grad_output, const DTensor& input);
DTensor rsqrt_backward(const DTensor& grad_output, const DTensor& input);
DTensor neg_backward(const DTensor& grad_output, const DTensor& input);
DTensor abs_backward(const DTensor& grad_output, const DTensor& input);
DTensor square_backward(const DTensor& grad_output, const DTensor& input);
DTensor clamp_backward(const DTensor& grad_output, const DTensor& input, std::optional<double> min,
                       std::optional<double> max);
DTensor pow_backward(const DTensor& grad_output, const DTensor& input, double exponent);

}  // namespace dtensor
