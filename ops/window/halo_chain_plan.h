// The plan of a fused chain along one spatial dim (halo_chain.h): from the
// global length, the rank's share of the output and the window the one
// exchange brings, which range of every convolution's output the rank
// computes and the local padding that gives exactly that range. Pure: global
// geometry in, ranges out; tested against brute force and fuzzed
// (fuzz/halo_chain_plan_fuzzer.cpp).
//
// Window layer k (a convolution, or a pool, which the plan reads as one;
// stride 1, "same": pad_left + pad_right = extent - 1) must give its output
// where the window layers after it read: the rank's share
// [o0, o1) widened by the later ones' padding, clipped to [0, L). Positions
// outside [0, L) are the next convolution's padding, so they are never
// computed: the local padding brings them in, as zeros or (reflect,
// replicate) filled from the rows the rank holds (held_padding.h).
// A chain whose convolutions all pad circularly is a ring instead: nothing
// is clipped, the exchange brings the wrapped halo, and every convolution
// computes its whole range with no local padding.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/ops/window.h"

namespace dtensor::detail {

/// One window layer of the chain (a convolution or a pool) along one dim.
struct ChainWindowDim {
  std::int64_t extent = 1;              // dilation * (kernel - 1) + 1
  std::int64_t pad_left = 0;            // pad_right = extent - 1 - pad_left
  Boundary boundary = Boundary::Zeros;  // its padding mode (a pool's: Zeros)
  std::int64_t pad_right() const { return extent - 1 - pad_left; }
};

/// Whether every convolution pads circularly: the chain is a ring.
bool chain_is_ring(const std::vector<ChainWindowDim>& convs);

/// What the exchange must bring: the chain read as one sliding window
/// (Boundary::Circular for a ring, else Boundary::Zeros: the window stops
/// at the input's edges and every convolution pads locally).
WindowDim chain_window(const std::vector<ChainWindowDim>& convs);

/// Why the convolutions cannot run as one exchange along a dim of `length`
/// whose smallest non-empty shard is `smallest_shard` (the length when the
/// dim is not sharded), or nullopt. Circular padding mixed with another
/// mode would need the far end's layers recomputed; a ring's combined halo
/// may wrap around once at most (as WindowExchange's); a reflect padding
/// must be shorter than the dim and read only rows every rank at that edge
/// holds: rows [1, l_k] at the left edge, where a rank holds at least its
/// share widened by the later convolutions' right reach (and mirrored on the
/// right). Pure; the same on every rank.
std::optional<std::string> chain_boundary_refusal(std::int64_t length, std::int64_t smallest_shard,
                                                  const std::vector<ChainWindowDim>& convs);

struct ChainStep {
  // Global ranges: the convolution's input (what the rank holds of it) and
  // output (what it computes), and the local padding between them.
  std::int64_t in_begin = 0, in_end = 0;
  std::int64_t out_begin = 0, out_end = 0;
  std::int64_t pad_left = 0, pad_right = 0;
};

struct ChainDimPlan {
  std::int64_t owned_begin = 0, owned_end = 0;  // the rank's share of every output
  std::vector<ChainStep> steps;                 // one per convolution
};

/// `length`: the dim's global length (every layer's); `owned`: the rank's
/// share of the output; `window_begin` / `window_end`: what the exchange
/// brought of the input (WindowSpan origin, origin + length). A rank with no
/// output (an empty share) computes nothing: every range is empty.
ChainDimPlan plan_chain_dim(std::int64_t length, std::int64_t owned_begin, std::int64_t owned_end,
                            std::int64_t window_begin, std::int64_t window_end,
                            const std::vector<ChainWindowDim>& convs);

/// Outputs [a, b) of a step (step-local: 0 is out_begin) and what they
/// read: held input [in_a, in_b) (step-local: 0 is in_begin) with the local
/// padding that gives exactly those outputs. Empty outputs read nothing.
struct ChainSubStep {
  std::int64_t a = 0, b = 0;
  std::int64_t in_a = 0, in_b = 0;
  std::int64_t pad_left = 0, pad_right = 0;
};
ChainSubStep chain_sub_step(const ChainStep& s, std::int64_t extent, std::int64_t a,
                            std::int64_t b);

/// The outputs of a step (step-local) that read nothing held outside
/// [own_begin, own_end) (global; padding is not held): what can be computed
/// before the halo around the rank's own input arrives. a == b: none.
std::pair<std::int64_t, std::int64_t> chain_interior(const ChainStep& s, std::int64_t extent,
                                                     std::int64_t own_begin, std::int64_t own_end);

}  // namespace dtensor::detail
