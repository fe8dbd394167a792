// The window engine's executor for one dim: assembles a rank's window along
// `dim` from its plan's runs (any boundary: forward, reflected and replicated
// runs, own and received), and returns a gradient over the window to the
// owners of its sources. One message per peer and direction: a rank packs,
// in the receiver's window order, every run of the receiver's window it owns.
//
// Both directions come in two halves, so a handler can compute while the
// messages travel, and both hand the kernel the window as tiles
// (TiledTensor) rather than one buffer: forward, the rank's own in-order runs
// are views of its shard and every received run a view of the buffer it
// arrived in; backward, the kernel writes the window's gradient straight into
// the owned gradient and into the buffers that go back. Only reflected and
// replicated runs get buffers of their own (they are short: a padding).
// Every window operator runs on this executor (WindowExchange, window.h).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/ops/tiled_tensor.h"
#include "ops/window/halo_plan.h"

namespace dtensor::window {

/// Forward: the window of `local` (owning me.input along `dim`) by me.runs.
/// Construction posts the exchange (this rank's runs for the others leave)
/// and lays out the window's tiles at once: the own runs hold data, the
/// received ones only after wait(). `group` may be null when the plan has
/// one rank. Dropped without wait() (the caller's compute threw), it does
/// not wait: a peer may have failed too; the works it drops are parked with
/// the group, keeping the buffers the transfers target alive.
class PendingRuns {
 public:
  /// `local`: the rank's owned range along `dim` (with the earlier dims'
  /// windows, as the tiles their exchanges left: no assembled copy).
  PendingRuns(const TiledTensor& local, std::int64_t dim, const HaloRankPlan& me,
              ProcessGroup* group, int tag);
  const TiledTensor& window() const { return window_; }
  /// Waits for the exchange; returns the complete window.
  const TiledTensor& wait();

 private:
  std::int64_t dim_;
  TiledTensor window_;
  std::vector<Tensor> outgoing_;  // kept alive until the sends complete
  // Received runs that are not forward: (the piece of the received buffer,
  // the run, its tile), written into their tiles once the message is in.
  struct Unpack {
    Tensor source;
    const WindowRun* run;
    Tensor tile;
  };
  std::vector<Unpack> unpack_;
  std::vector<std::shared_ptr<Work>> works_;
};

/// Backward, the reverse, in two halves around the kernel that computes the
/// window's gradient. `window()` is where the kernel writes it: one own
/// in-order run straight into the owned gradient, the runs owned by others
/// into the buffers that post() sends back to them (where they are added),
/// any other run into a buffer of its own; the parts others send here are
/// added into the owned gradient.
class RunGradient {
 public:
  RunGradient(const Shape& owned_shape, DType dtype, Device device, std::int64_t dim,
              const HaloRankPlan& me);
  const TiledTensor& window() const { return window_; }
  /// Posts the exchange (after the kernel has written window()); adds the
  /// own runs' other parts while the messages travel.
  void post(ProcessGroup* group, int tag);
  /// Waits for it and returns the gradient over the owned range; positions
  /// in no window get 0.
  Tensor finish();

 private:
  // A run's gradient tile that is not written in place, and where its
  // sources' gradient goes (a piece of a buffer going back, or of grad_).
  struct Piece {
    const WindowRun* run;
    Tensor tile;
    Tensor target;
  };
  std::int64_t dim_;
  const HaloRankPlan& me_;
  Tensor grad_;
  TiledTensor window_;
  std::vector<std::pair<std::int64_t, Tensor>> outgoing_;  // (peer, packed buffer)
  std::vector<std::vector<Piece>> outgoing_pieces_;        // non-forward runs, per buffer
  std::vector<Piece> own_pieces_;                          // own runs added into grad_
  std::vector<std::pair<Tensor, std::vector<const WindowRun*>>> incoming_;
  std::vector<std::shared_ptr<Work>> works_;
};

/// Both halves of the forward at once, the window in one tensor (a view of
/// `local` when the window is a piece of it).
/// Both halves of the backward around a gradient already computed over the
/// window (the window's extent along `dim`, `owned_shape` elsewhere).
Tensor scatter_add_runs(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                        ProcessGroup* group, const Shape& owned_shape, int tag);

}  // namespace dtensor::window
