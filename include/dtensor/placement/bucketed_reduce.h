// Reducing many pending sums at once: the gradients of a network's layers
// (Partial(sum) after convolution_backward) become Replicate in a few large
// all-reduces instead of one small all-reduce per tensor, like DDP's buckets.
#pragma once

#include <cstddef>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// Returns the tensors with every Partial(sum) placement replaced by
/// Replicate (other placements kept). Tensors on the same mesh with the same
/// dtype and placements are packed into buckets of at most `bucket_bytes`
/// (one larger tensor gets a bucket of its own) and reduced with one
/// all-reduce per bucket and Partial mesh dim. The result equals calling
/// redistribute on each tensor.
std::vector<DTensor> reduce_partials(const std::vector<DTensor>& tensors,
                                     std::size_t bucket_bytes = std::size_t{25} << 20);

}  // namespace dtensor
