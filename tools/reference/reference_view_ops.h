// Naive f64 oracles of the shape operators (reshape/flatten, permute/
// transpose, narrow), forward and gradient: index loops over whole tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::reference {

/// The elements of x in row-major order laid out as `shape` (same numel).
Tensor ref_reshape(const Tensor& x, const Shape& shape);
/// y[i_0, ..., i_{n-1}] = x[j] with j[order[k]] = i_k.
Tensor ref_permute(const Tensor& x, const std::vector<std::int64_t>& order);
/// The gradient of permute by `order`: grad_output permuted back.
Tensor ref_permute_grad_input(const Tensor& grad_output, const std::vector<std::int64_t>& order);
/// x[..., start:start + length, ...] along `dim`.
Tensor ref_narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length);
/// The gradient of narrow: grad_output at [start, start + length) along
/// `dim`, zeros elsewhere, in `input_shape`.
Tensor ref_narrow_grad_input(const Tensor& grad_output, const Shape& input_shape, std::int64_t dim,
                             std::int64_t start);

}  // namespace dtensor::reference
