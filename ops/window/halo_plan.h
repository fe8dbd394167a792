// The window engine's plan for ONE spatial dim over the P ranks of the mesh
// dim that shards it (P = 1 when none does): what each rank owns, computes,
// needs, and exchanges (docs/halo.md).
//
// Computed from global sizes alone, identically on every rank, so ranks never
// negotiate sizes: each rank builds the whole plan and reads its own row (and,
// to check matching, its peers'). Several sharded dims apply one plan per dim.
//
// Coordinates are global input positions along the dim. Ranges are half-open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/ops/window.h"
#include "dtensor/placement/chunk.h"

namespace dtensor {

/// A sliding window with zero padding, the convolution's geometry (the
/// plan's original form: dtensor-conv's local bench and the plan's tests
/// speak it; the library plans from WindowDim).
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

/// One run of a window: `count` window positions from `dst` on, read from
/// the source positions [lo, hi) that `peer` owns. Forward: window[dst + t]
/// = x[lo + t]; Reversed: = x[hi - 1 - t] (reflection); Repeat: = x[lo]
/// (replication; hi = lo + 1). With Boundary::Zeros every run is Forward.
struct WindowRun {
  enum class Order { Forward, Reversed, Repeat };
  std::int64_t peer = 0;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  std::int64_t dst = 0;
  std::int64_t count = 0;
  Order order = Order::Forward;

  /// Source elements the run carries (what travels): hi - lo.
  std::int64_t length() const { return hi - lo; }
  bool operator==(const WindowRun&) const = default;
};

/// What one rank owns, needs, computes and exchanges.
struct HaloRankPlan {
  std::int64_t rank = 0;
  Extent input;   // owned input [i0, i1) = chunk(L, P, r)
  Extent output;  // owned output [o0, o1) = chunk(O, P, r)

  bool has_output = false;  // o1 > o0; without it the rank only sends
  /// Needed window [a, b] (inclusive), before clipping; may reach outside [0, L).
  /// Meaningful only with has_output.
  std::int64_t need_first = 0;
  std::int64_t need_last = -1;
  /// The window reads no data at all (a > L-1 or b < 0, or a > b): the output
  /// is the bias alone and the backward adds nothing.
  bool window_in_padding = false;

  /// The window: with Boundary::Zeros [a, b] clipped to [0, L), the input the
  /// local kernel runs on; otherwise [a, b + 1) in virtual coordinates, its
  /// padding materialised. Empty when there is no output or (zeros) the
  /// window lies wholly in the padding.
  Extent window;
  /// Local padding (lp, rp) of a sliding window's kernel on `window`: with
  /// these, a stride-s, dilation-d kernel over `window` yields exactly o1 - o0
  /// outputs. For a window wholly in padding, lp + rp spans [a, b] (lp = b - a
  /// + 1, rp = 0). Zero for materialised boundaries.
  std::int64_t pad_left = 0;
  std::int64_t pad_right = 0;

  /// The window as runs in window order, own runs included (the executor's
  /// recipe), and the runs of the other ranks' windows this rank owns
  /// (`peer` = the receiver), in the order of (receiver, receiver's window
  /// order): what this rank packs for each.
  std::vector<WindowRun> runs;
  std::vector<WindowRun> run_sends;

  /// The same as transfers of source ranges: what arrives from each other
  /// rank (one per run; with Boundary::Zeros one per peer, in ascending
  /// peer order, so the window is assembled left to right), and what this
  /// rank sends.
  std::vector<HaloTransfer> recv() const;
  std::vector<HaloTransfer> send() const;
  /// Backward (grad_input) runs the forward exchange in reverse: the window's
  /// gradient parts owned by others go back to them (= forward recv) and are
  /// added into the owned gradient there; what arrives (= forward send) is
  /// added into the owned range.
  std::vector<HaloTransfer> grad_send() const { return recv(); }
  std::vector<HaloTransfer> grad_recv() const { return send(); }

  /// Part of the window that this rank owns itself (possibly empty): copied, not sent.
  Extent own_part() const;
};

class HaloPlan {
 public:
  /// A zero-padded sliding window (a convolution). Throws InvalidArgument
  /// (naming the parameter) for a geometry with no output or invalid values.
  explicit HaloPlan(const HaloGeometry& g);
  /// Any window geometry over `length` inputs on `ranks` ranks.
  HaloPlan(std::int64_t length, std::int64_t ranks, const WindowDim& dim);

  const WindowDim& dim() const { return dim_; }
  /// The sliding geometry (meaningful for sliding windows: a convolution's).
  HaloGeometry geometry() const {
    return {length_,       ranks_count(), dim_.kernel,   dim_.stride,
            dim_.dilation, dim_.pad_left, dim_.pad_right};
  }
  std::int64_t length() const { return length_; }
  std::int64_t ranks_count() const { return static_cast<std::int64_t>(ranks_.size()); }
  std::int64_t output_length() const { return output_length_; }
  std::int64_t kernel_extent() const { return dim_.extent(); }
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
  void build();
  WindowDim dim_;
  std::int64_t length_ = 0;
  std::int64_t output_length_ = 0;
  std::vector<HaloRankPlan> ranks_;
};

/// HaloPlan(length, ranks, dim), built once per distinct argument and then
/// shared: a window operator's exchange asks for its plans on every call,
/// and a plan is a pure function of these. Throws as the constructor does
/// (nothing is kept then). Safe from any thread.
std::shared_ptr<const HaloPlan> shared_halo_plan(std::int64_t length, std::int64_t ranks,
                                                 const WindowDim& dim);

}  // namespace dtensor
