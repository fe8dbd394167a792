// Shape operators on DTensors with torch's semantics: reshape, flatten,
// permute, transpose and narrow, forward and through autograd.
//
// Placements follow PyTorch DTensor's view rules (docs/operators.md): Shard
// moves with its dim (permute, transpose), a merged or split dim keeps its
// Shard on the outermost piece when every rank's shard of the result is its
// shard of the input, and otherwise that dim is redistributed to Replicate
// first; narrow replicates the dim it narrows when that dim is sharded.
// Replicate and Partial pass through. Locally, reshape is a view when the
// local tensor is contiguous; permute copies through the "layout.permute"
// kernel (dtensor/ops/kernels/permute.h). Negative dims count from the end;
// a bad argument is an InvalidArgument naming the parameter, on every rank.
// The same operators are DTensor members (x.reshape(...), ...).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// torch.reshape: `shape` holds the same number of elements as the input,
/// one entry may be -1 (inferred).
DTensor reshape(const DTensor& input, const Shape& shape);
/// torch.flatten: dims start_dim..end_dim merged into one (a 0-d input
/// becomes [1]).
DTensor flatten(const DTensor& input, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
/// torch.permute: output dim k is input dim order[k] (a permutation of the dims).
DTensor permute(const DTensor& input, const std::vector<std::int64_t>& order);
/// torch.transpose: dims dim0 and dim1 swapped.
DTensor transpose(const DTensor& input, std::int64_t dim0, std::int64_t dim1);
/// torch.narrow: [start, start + length) along `dim`; a negative start counts
/// from the end of the dim.
DTensor narrow(const DTensor& input, std::int64_t dim, std::int64_t start, std::int64_t length);

/// The gradient of narrow: grad_output placed at [start, start + length)
/// along `dim` in zeros of `input_shape`.
DTensor narrow_backward(const DTensor& grad_output, const Shape& input_shape, std::int64_t dim,
                        std::int64_t start);

/// The arguments resolved as the operators resolve them, for front ends that
/// record them (dtensor-op's meta.json): the -1 filled in, negative dims and
/// starts made non-negative. They throw the operators' InvalidArgument.
Shape resolved_reshape_shape(const Shape& input_shape, const Shape& shape);
std::vector<std::int64_t> resolved_permute_order(std::int64_t ndim,
                                                 const std::vector<std::int64_t>& order);
/// flatten's [start_dim, end_dim], both non-negative.
std::pair<std::int64_t, std::int64_t> resolved_flatten_dims(std::int64_t ndim,
                                                            std::int64_t start_dim,
                                                            std::int64_t end_dim);

}  // namespace dtensor
