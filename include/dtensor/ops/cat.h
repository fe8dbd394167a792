// torch.cat on DTensors (skip connections), forward and backward.
//
// Inputs placed alike and concatenated along a dim none of them shards are
// concatenated locally, the output placed alike (Partial passes through: cat
// is linear). Otherwise (the cat dim is sharded, or the inputs are placed
// differently) the propagator redistributes them at the lowest cost to a
// common placement that does not shard the cat dim. Argument layout:
// docs/operators.md.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// Concatenates `inputs` (same mesh, dtype and rank; equal sizes but along
/// `dim`, which may be negative) along `dim`.
DTensor cat(const std::vector<DTensor>& inputs, std::int64_t dim);

/// The gradient of cat: grad_output split along `dim` into pieces the sizes of
/// `inputs`' (their values are not read); piece i is placed like inputs[i].
std::vector<DTensor> cat_backward(const DTensor& grad_output, const std::vector<DTensor>& inputs,
                                  std::int64_t dim);
/// The same with the sizes along `dim` given; the pieces stay placed like
/// grad_output (but never sharded along `dim`).
std::vector<DTensor> cat_backward(const DTensor& grad_output,
                                  const std::vector<std::int64_t>& sizes, std::int64_t dim);

}  // namespace dtensor
