// Reductions over a list of dims (sum, mean, amax, amin, var) and softmax /
// log_softmax along one dim, with PyTorch's semantics, forward and through
// autograd, for DTensors of any placement.
//
// `dims`: empty = every dim; negative dims count from the end; a dim given
// twice or out of range is an InvalidArgument naming `dims`. `keepdim`
// keeps each reduced dim with size 1. Placements (docs/operators.md): a dim
// that is not reduced keeps its Shard; a reduced dim that is sharded leaves
// sum and mean Partial(sum), amax Partial(max) and amin Partial(min) on that
// mesh dim (reduced when read, as PyTorch's DTensor does), and var merges
// the ranks' (count, mean, M2) with Chan's formula into a replicated result.
// A Partial(sum) input stays Partial under sum and mean; the others reduce it
// first. Local arithmetic: the "reduce.*" kernels (dtensor/ops/kernels/reduce.h).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// torch.sum(x, dims, keepdim).
DTensor sum(const DTensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// torch.mean(x, dims, keepdim).
DTensor mean(const DTensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// torch.amax(x, dims, keepdim): NaN wins; the gradient is shared evenly among ties.
DTensor amax(const DTensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// torch.amin(x, dims, keepdim): NaN wins; the gradient is shared evenly among ties.
DTensor amin(const DTensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// torch.var(x, dims, correction=correction, keepdim): M2 / max(0, N - correction)
/// with N the number of elements reduced into each result.
DTensor var(const DTensor& x, const std::vector<std::int64_t>& dims, double correction = 1.0,
            bool keepdim = false);

/// torch.softmax(x, dim): exp(x - max) / sum(exp(x - max)) along `dim` (negative
/// allowed). A sharded `dim` takes the max across ranks, then the sum across ranks.
DTensor softmax(const DTensor& x, std::int64_t dim);
/// torch.log_softmax(x, dim): (x - max) - log(sum(exp(x - max))) along `dim`.
DTensor log_softmax(const DTensor& x, std::int64_t dim);

/// `dims` as the reductions read them: every dim when empty, negatives made
/// non-negative, sorted; InvalidArgument naming `dims` when one is out of
/// range for an `ndim`-d tensor or given twice.
std::vector<std::int64_t> normalize_reduction_dims(const std::vector<std::int64_t>& dims,
                                                   std::int64_t ndim);

}  // namespace dtensor
