// Naive f64 oracles of the reductions over dims (sum, mean, amax, amin, var)
// and of softmax / log_softmax, forward and the input's gradient, with
// PyTorch's conventions: amax / amin share the gradient evenly among the
// elements equal to the result; var divides by max(0, N - correction).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::reference {

/// op(x, dims, keepdim) with `dims` resolved (non-negative, sorted; all dims
/// when empty is meant, list them); `correction` is var's.
Tensor ref_reduce_forward(std::string_view op, const Tensor& x,
                          const std::vector<std::int64_t>& dims, bool keepdim, double correction);
/// The gradient of x given the result's (of the result's shape).
Tensor ref_reduce_grad_input(std::string_view op, const Tensor& grad_output, const Tensor& x,
                             const std::vector<std::int64_t>& dims, double correction);

/// softmax (or log_softmax, with `logarithm`) of x along `dim` (non-negative).
Tensor ref_softmax_forward(bool logarithm, const Tensor& x, std::int64_t dim);
Tensor ref_softmax_grad_input(bool logarithm, const Tensor& grad_output, const Tensor& x,
                              std::int64_t dim);

}  // namespace dtensor::reference
