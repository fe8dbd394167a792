// The plan of a fused chain along one spatial dim (halo_chain.h): from the
// global length, the rank's share of the output and the window the one
// exchange brings, which range of every convolution's output the rank
// computes and the local padding that gives exactly that range. Pure: global
// geometry in, ranges out; tested against brute force (strided chains too)
// and fuzzed (fuzz/halo_chain_plan_fuzzer.cpp, strided chains too).
//
// Window layer k (a convolution, or a pool, which the plan reads as one; or
// an upsample or transposed convolution, a transposed window) must give its
// output where the window layers after it read: the rank's
// share [o0, o1) of the last output widened by what the later ones read,
// clipped to [0, L_k) (for stride-1 "same" layers, pad_left + pad_right =
// extent - 1, every L_k is the input's L; strides and other padding change
// it: the chain resamples). Positions outside [0, L_k) are the next layer's
// padding, so they are never computed: the local padding brings them in,
// as zeros or (reflect, replicate) filled from the rows the rank holds
// (held_padding.h).
// A chain whose convolutions all pad circularly is a ring instead: nothing
// is clipped, the exchange brings the wrapped halo, and every convolution
// computes its whole range with no local padding. A transposed window pads
// nothing: its reach beyond the input reads nothing, and its range is cut
// from the whole output of what it holds.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/ops/window.h"
#include "ops/window/integer_division.h"

namespace dtensor::detail {

/// One window layer of the chain along one dim: a sliding window (a
/// convolution or a pool: output o reads inputs o * stride - pad_left +
/// [0, extent)), or a transposed one (an upsample: input i writes outputs
/// i * stride - pad_left + [0, extent), so output o reads inputs
/// ceil((o + pad_left - extent + 1) / stride) to floor((o + pad_left) /
/// stride); an interpolation's footprint, which holds every input its
/// taps read).
struct ChainWindowDim {
  std::int64_t extent = 1;              // dilation * (kernel - 1) + 1
  std::int64_t pad_left = 0;            // pad_right: right, or "same"
  Boundary boundary = Boundary::Zeros;  // its padding mode (a pool's: Zeros)
  std::int64_t stride = 1;
  // The right padding where it is not "same" (extent - 1 - pad_left); a
  // transposed window's is always given.
  std::optional<std::int64_t> right{};
  bool transposed = false;
  std::int64_t pad_right() const { return right ? *right : extent - 1 - pad_left; }
  /// Its output's length for an input of `length` (floor, as PyTorch's).
  std::int64_t output_length(std::int64_t length) const {
    if (transposed) {
      const std::int64_t out = (length - 1) * stride - pad_left - pad_right() + extent;
      return length < 1 || out < 0 ? 0 : out;
    }
    const std::int64_t span = length + pad_left + pad_right() - extent;
    return span < 0 ? 0 : span / stride + 1;
  }
  /// The input [lo, hi) outputs [a, b) read (padding included: lo may be
  /// negative, hi beyond the input; a transposed window's reach beyond the
  /// input reads nothing). a == b: none.
  std::pair<std::int64_t, std::int64_t> reads(std::int64_t a, std::int64_t b) const {
    if (b <= a) return {0, 0};
    if (transposed)
      return {window::ceil_div(a + pad_left - extent + 1, stride),
              window::floor_div(b - 1 + pad_left, stride) + 1};
    return {a * stride - pad_left, (b - 1) * stride - pad_left + extent};
  }
};

/// Whether every convolution pads circularly: the chain is a ring.
bool chain_is_ring(const std::vector<ChainWindowDim>& convs);

/// Whether a layer is transposed (an upsample): the chain upsamples.
bool chain_upsamples(const std::vector<ChainWindowDim>& convs);

/// What the exchange must bring: the chain read as one sliding window (its
/// strides multiplied, each layer's extent and padding scaled by the
/// strides before it; Boundary::Circular for a ring, else Boundary::Zeros:
/// the window stops at the input's edges and every convolution pads
/// locally). A chain that upsamples (its sliding layers of stride 1) reads
/// as one transposed window instead, whose reads stop at the input's edges.
WindowDim chain_window(const std::vector<ChainWindowDim>& convs);

/// Why the convolutions cannot run as one exchange along a dim of `length`
/// whose smallest non-empty shard is `smallest_shard` (the length when the
/// dim is not sharded), or nullopt. Circular padding mixed with another
/// mode would need the far end's layers recomputed; a ring's combined halo
/// may wrap around once at most (as WindowExchange's); a reflect padding
/// must be shorter than the dim and read only rows every rank at that edge
/// holds: rows [1, l_k] at the left edge, where a rank holds at least its
/// share widened by the later convolutions' right reach (and mirrored on the
/// right). A chain that upsamples pads with zeros, and each of its
/// transposed windows is at least as wide as its stride and pads its right
/// side by 0 or more (else some outputs would read no input). Pure; the
/// same on every rank.
std::optional<std::string> chain_boundary_refusal(std::int64_t length, std::int64_t smallest_shard,
                                                  const std::vector<ChainWindowDim>& convs);

struct ChainStep {
  // Global ranges: the convolution's input (what the rank holds of it) and
  // output (what it computes), and the local padding between them. Of the
  // held input the layer reads all but `skip_left` / `skip_right` rows at
  // its ends (only a strided chain's first layer skips: the window reaches
  // rows no output reads).
  std::int64_t in_begin = 0, in_end = 0;
  std::int64_t out_begin = 0, out_end = 0;
  std::int64_t pad_left = 0, pad_right = 0;
  std::int64_t skip_left = 0, skip_right = 0;
  // The rank's share of the output's cells (the norms' statistics count
  // these): every rank's shares tile the output, and each lies inside the
  // range the rank computes.
  std::int64_t owned_begin = 0, owned_end = 0;
};

struct ChainDimPlan {
  std::int64_t owned_begin = 0, owned_end = 0;  // the rank's share of the chain's output
  std::vector<ChainStep> steps;                 // one per window layer
  std::vector<std::int64_t> lengths;            // each step's input's, then the output's
};

/// `length`: the dim's global length at the chain's input; `owned`: the
/// rank's share of the chain's output; `window_begin` / `window_end`: what
/// the exchange brought of the input (WindowSpan origin, origin + length). A
/// rank with no output (an empty share) computes nothing: every range is
/// empty. An intermediate's shares follow the output's back through the
/// layers after it: a layer of stride s whose outputs [a, b) the rank owns
/// gives it its input's [a s - c, b s - c), c = max(0, s + pad_left -
/// extent), the first share reaching down to 0 and the last up to the
/// input's end (for a stride-1 "same" layer: [a, b)); a transposed window
/// of stride s gives it its input's [ceil((a + l - t) / s), ceil((b + l -
/// t) / s)), t = min(l, extent - 1): input i goes to the rank owning output
/// i s - l + t, which it writes; it lies inside what
/// the rank computes wherever the layers after it read every input cell
/// (chain_statistics_refusal).
ChainDimPlan plan_chain_dim(std::int64_t length, std::int64_t owned_begin, std::int64_t owned_end,
                            std::int64_t window_begin, std::int64_t window_end,
                            const std::vector<ChainWindowDim>& convs);

/// Why a norm's statistics at the input of window layer `first` (over the
/// shares above) cannot be counted along a dim of `length`, or nullopt:
/// some layer from `first` on leaves input cells no output reads, which no
/// rank would compute. Pure.
std::optional<std::string> chain_statistics_refusal(std::int64_t length, std::size_t first,
                                                    const std::vector<ChainWindowDim>& layers);

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
