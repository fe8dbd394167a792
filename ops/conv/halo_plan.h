// The halo exchange plan of DESIGN.md §5 for ONE sharded spatial dimension.
//
// Computed from global sizes alone, identically on every rank, so ranks never
// negotiate sizes: each rank builds the whole plan and reads its own row (and,
// to check matching, its peers'). Several sharded dims apply one plan per dim.
//
// Coordinates are global input positions along the dim. Ranges are half-open.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/placement/chunk.h"

namespace dtensor {

/// The global geometry of one spatial dim of a convolution over P ranks.
struct HaloGeometry {
  std::int64_t length = 0;     // L: global input length
  std::int64_t ranks = 1;      // P: ranks on the mesh dim that shards this dim
  std::int64_t kernel = 1;     // K
  std::int64_t stride = 1;     // s
  std::int64_t dilation = 1;   // d
  std::int64_t pad_left = 0;   // pl
  std::int64_t pad_right = 0;  // pr
};

/// A contiguous piece of the input exchanged with one peer: [lo, hi), global.
struct HaloTransfer {
  std::int64_t peer = 0;
  std::int64_t lo = 0;
  std::int64_t hi = 0;

  std::int64_t length() const { return hi - lo; }
  bool operator==(const HaloTransfer&) const = default;
};

/// What one rank owns, needs, computes and exchanges.
struct HaloRankPlan {
  std::int64_t rank = 0;
  Extent input;   // owned input [i0, i1) = chunk(L, P, r)
  Extent output;  // owned output [o0, o1) = chunk(O, P, r)

  bool has_output = false;  // o1 > o0; without it the rank only sends
  /// Needed window [a, b] (inclusive), before clipping; may reach outside [0, L).
  /// Meaningful only with has_output.
  std::int64_t need_first = 0;  // a = o0*s - pl
  std::int64_t need_last = -1;  // b = (o1-1)*s - pl + E - 1
  /// The window reads no data at all (a > L-1 or b < 0): the output is the bias
  /// alone and the backward adds nothing to grad_input / grad_weight.
  bool window_in_padding = false;

  /// Clipped window [a', b'+1): the input the local convolution runs on. Empty
  /// when there is no output or the window lies wholly in the padding.
  Extent window;
  /// Local padding (lp, rp) for the local convolution on `window`: with these, a
  /// stride-s, dilation-d convolution of `window` yields exactly o1 - o0 outputs.
  /// For a window wholly in padding, lp + rp spans [a, b] (lp = b - a + 1, rp = 0),
  /// so a convolution of the empty window still has the right output length.
  std::int64_t pad_left = 0;
  std::int64_t pad_right = 0;

  /// Forward: pieces of the window owned by other ranks, received from them
  /// (ascending peer order, so the window is assembled left to right).
  std::vector<HaloTransfer> recv;
  /// Forward: pieces of the owned input that other ranks' windows need.
  std::vector<HaloTransfer> send;

  /// Backward (grad_input) runs the forward exchange in reverse: the window's
  /// gradient parts owned by others go back to them (= forward recv) and are
  /// added into the owned gradient there; what arrives (= forward send) is
  /// added into the owned range.
  const std::vector<HaloTransfer>& grad_send() const { return recv; }
  const std::vector<HaloTransfer>& grad_recv() const { return send; }

  /// Part of the window that this rank owns itself (possibly empty): copied, not sent.
  Extent own_part() const;
};

class HaloPlan {
 public:
  /// Builds the plan; throws InvalidArgument (naming the parameter) for a
  /// geometry with no output or invalid values.
  explicit HaloPlan(const HaloGeometry& g);

  const HaloGeometry& geometry() const { return geometry_; }
  std::int64_t output_length() const { return output_length_; }
  std::int64_t kernel_extent() const { return kernel_extent_; }
  const HaloRankPlan& rank(std::int64_t r) const;
  const std::vector<HaloRankPlan>& ranks() const { return ranks_; }

  /// Whether any rank sends anything (false e.g. for P = 1, or stride == K with
  /// shards aligned to the stride).
  bool needs_exchange() const;
  /// Input positions exchanged in total, summed over ranks (for traffic stats).
  std::int64_t exchanged_elements() const;

  /// Multi-line description, one line per rank (for logs and test failures).
  std::string str() const;

 private:
  HaloGeometry geometry_;
  std::int64_t output_length_ = 0;
  std::int64_t kernel_extent_ = 0;
  std::vector<HaloRankPlan> ranks_;
};

}  // namespace dtensor
