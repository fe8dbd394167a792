// The kernel slots of linear: one rank's rows times the whole weight. ops/
// flattens the leading dims into rows and sums the weight's and bias's
// gradients across ranks; these do the products on one rank.
#pragma once

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// output [M, K] = input [M, in] weight [K, in]^T (+ bias [K] on every row).
/// All contiguous, of the slot's dtype; bias undefined when there is none.
struct LinearArgs {
  Tensor input, weight, bias;
  Tensor output;  // out
};
/// grad_input [M, in] = grad_output [M, K] weight; grad_weight [K, in] =
/// grad_output^T input; grad_bias [K] = grad_output summed over the rows
/// (this rank's rows only).
struct LinearBackwardArgs {
  Tensor grad_output, input, weight;
  Tensor grad_input, grad_weight, grad_bias;  // out
};

inline constexpr KernelSlot<LinearArgs> kLinear{"linear.forward"};
inline constexpr KernelSlot<LinearBackwardArgs> kLinearBackward{"linear.backward"};

}  // namespace dtensor::kernels
