// Dropout on DTensors (F.dropout): each element is zeroed with probability
// p and the kept ones scaled by 1 / (1 - p). The mask depends only on a seed,
// a stream number and each element's global (row-major) index, never on the
// mesh, the placements or the rank, so one seed gives the same output on one
// rank and on any mesh: element i is kept when uniform(seed, stream, i) >= p
// (the counter-based hash of docs/operators.md, computed where the element
// lives, no communication). The backward applies the same mask to the
// gradient.
#pragma once

#include <cstdint>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// Seeds the dropout generator of this thread and restarts its stream count
/// (torch.manual_seed); the library starts as if manual_seed(0) was called.
/// Each training-mode dropout() call takes the next stream, so two calls
/// draw different masks, the same on every rank that makes the same calls.
void manual_seed(std::uint64_t seed);

/// The generator's state: its seed and the next call's stream.
struct DropoutGeneratorState {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
};
DropoutGeneratorState dropout_generator_state();
void set_dropout_generator_state(const DropoutGeneratorState& state);

/// F.dropout(input, p, training): without training the input itself; with
/// it, the mask of the generator's next stream. p in [0, 1] (1 zeroes every
/// element, as PyTorch); anything else is an InvalidArgument naming `p`.
/// Any placement; a Partial input stays Partial (dropout is linear in the
/// input for a fixed mask, and every rank draws the same mask).
DTensor dropout(const DTensor& input, double p, bool training = true);
/// The same with an explicit seed and stream (the generator is untouched).
DTensor dropout(const DTensor& input, double p, std::uint64_t seed, std::uint64_t stream);
/// grad_output * mask / (1 - p), the mask of (seed, stream): the gradient of
/// that dropout() call.
DTensor dropout_backward(const DTensor& grad_output, double p, std::uint64_t seed,
                         std::uint64_t stream);

}  // namespace dtensor
