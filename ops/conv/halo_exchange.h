// Moving halos along one sharded spatial dim (docs/design.md §5), over the group
// of the mesh dim that shards it. The convolution handler calls these; they
// know ranges and a ProcessGroup, never sockets. Every message goes with the
// caller's `tag`: the convolution handlers pass a stream number and the
// call's group (OpCall::group) moves it into the call's own tag space, so an
// exchange may be posted before the call's agreement check is confirmed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/ops/tiled_tensor.h"
#include "ops/window/halo_plan.h"

namespace dtensor::conv {

/// Forward: the window [a', b'] of `local` (which owns me.input along tensor
/// dim `dim`) as tiles, without copying: the own part is a view of `local`,
/// each piece received from its owner lands in its own buffer. Meanwhile this
/// rank sends what the others' windows need from it.
TiledTensor gather_window_tiles(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                                ProcessGroup& group, int tag);

/// The same, in two halves: the exchange is posted and the window's tiles
/// exist at once (the own part holds data; the received strips only after
/// wait()), so a caller can compute what needs no halo while it is in flight.
/// Dropped without wait() (the caller's compute threw), it does not wait: a
/// peer may have failed too; the works it drops are parked with the group,
/// keeping the buffers the transfers target alive.
class PendingWindow {
 public:
  PendingWindow(const Tensor& local, std::int64_t dim, const HaloRankPlan& me, ProcessGroup& group,
                int tag);
  const TiledTensor& window() const { return window_; }
  /// Waits for the exchange (sends and receives); returns the complete window.
  const TiledTensor& wait();

 private:
  TiledTensor window_;
  std::vector<Tensor> outgoing_;  // kept alive until the sends complete
  std::vector<std::shared_ptr<Work>> works_;
};

/// The same window in one tensor (a view of `local` when nothing is received).
Tensor gather_window(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                     ProcessGroup& group, int tag);

/// Backward, the reverse, in two halves around the kernel that computes the
/// window's gradient. `window()` is where the kernel writes it: the own part
/// straight into the owned gradient, the parts owned by others into buffers
/// that finish() sends back to them (where they are added), while the parts
/// others send here are added into the owned gradient.
class WindowGradient {
 public:
  WindowGradient(const Shape& owned_shape, DType dtype, Device device, std::int64_t dim,
                 const HaloRankPlan& me);
  const TiledTensor& window() const { return window_; }
  /// Posts the exchange (after the kernel has written window()): the strips
  /// go back, the others' strips for this rank start arriving.
  void post(ProcessGroup& group, int tag);
  /// Waits for it and returns the gradient over the owned range; positions
  /// in no window get 0.
  Tensor finish();
  /// post + finish.
  Tensor finish(ProcessGroup& group, int tag);

 private:
  std::int64_t dim_;
  const HaloRankPlan& me_;
  Tensor grad_;
  TiledTensor window_;
  std::vector<Tensor> outgoing_;                           // one per me.grad_send(), in order
  std::vector<std::pair<Tensor, std::int64_t>> incoming_;  // buffer, offset in the owned range
  std::vector<std::shared_ptr<Work>> works_;
};

/// Both halves around a gradient already computed over the window (shape of
/// the window along `dim`, of `owned_shape` elsewhere).
Tensor scatter_add_window(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                          ProcessGroup& group, const Shape& owned_shape, int tag);

}  // namespace dtensor::conv
