// Element-wise operators and reductions on DTensors: enough for a loss and a
// training step. Each goes through dispatch() like a user's operator would.
//
// The binary operators broadcast as NumPy (and PyTorch) do: shapes are
// aligned at their last dims and a dim of size 1 (or a missing one) is
// repeated. Both operands have the same dtype. Placements: docs/operators.md.
#pragma once

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// a + b.
DTensor add(const DTensor& a, const DTensor& b);
/// a - b.
DTensor sub(const DTensor& a, const DTensor& b);
/// a * b element-wise.
DTensor mul(const DTensor& a, const DTensor& b);
/// a / b element-wise (true division).
DTensor div(const DTensor& a, const DTensor& b);
/// The larger of a and b element-wise; NaN where either is NaN (torch.maximum).
DTensor maximum(const DTensor& a, const DTensor& b);
/// The smaller of a and b element-wise; NaN where either is NaN (torch.minimum).
DTensor minimum(const DTensor& a, const DTensor& b);
/// The shape a and b broadcast to; InvalidArgument naming both when they do not.
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// `a` summed over the dims along which `shape` is broadcast to a's shape
/// (Tensor.sum_to_size): the gradient of a broadcast operand. A dim sharded
/// in `a` and summed away makes the result Partial(sum) on that mesh dim.
DTensor sum_to_size(const DTensor& a, const Shape& shape);
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

/// A 0-d replicated DTensor holding `value` on a's mesh, device and dtype:
/// the other operand of `a + 2.0` and the like.
DTensor scalar_like(const DTensor& a, double value);

DTensor operator+(const DTensor& a, const DTensor& b);
DTensor operator-(const DTensor& a, const DTensor& b);
DTensor operator*(const DTensor& a, const DTensor& b);
DTensor operator/(const DTensor& a, const DTensor& b);
DTensor operator+(const DTensor& a, double s);
DTensor operator+(double s, const DTensor& a);
DTensor operator-(const DTensor& a, double s);
DTensor operator-(double s, const DTensor& a);
/// a * s goes through scale(), which keeps a Partial(sum) operand Partial.
DTensor operator*(const DTensor& a, double s);
DTensor operator*(double s, const DTensor& a);
DTensor operator/(const DTensor& a, double s);
DTensor operator/(double s, const DTensor& a);
/// neg(a).
DTensor operator-(const DTensor& a);

}  // namespace dtensor
