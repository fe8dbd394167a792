#include "ops/conv/halo_exchange.h"

#include "dtensor/core/errors.h"

namespace dtensor::conv {
namespace {

Shape with_extent(Shape s, std::int64_t dim, std::int64_t len) {
  s[static_cast<std::size_t>(dim)] = len;
  return s;
}

// Where a tile starts in the window: `pos` along `dim`, 0 elsewhere.
Shape at(std::size_t ndim, std::int64_t dim, std::int64_t pos) {
  Shape o(ndim, 0);
  o[static_cast<std::size_t>(dim)] = pos;
  return o;
}

}  // namespace

PendingWindow::PendingWindow(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                             ProcessGroup& group, int tag) {
  DTENSOR_CHECK_ARG(local.size(dim) == me.input.length, "conv",
                    "halo exchange: local extent {} along dim {} but the plan owns {}",
                    local.size(dim), dim, me.input.length);
  const std::int64_t a = me.window.offset, i0 = me.input.offset;
  const std::size_t nd = local.shape().size();
  window_ =
      TiledTensor(with_extent(local.shape(), dim, me.window.length), local.dtype(), local.device());
  std::vector<P2POp> ops;
  for (const auto& t : me.recv) {
    Tensor piece =
        Tensor::empty(with_extent(local.shape(), dim, t.length()), local.dtype(), local.device());
    window_.add(piece, at(nd, dim, t.lo - a));
    ops.push_back(P2POp::recv(piece, static_cast<int>(t.peer), tag));
  }
  for (const auto& t : me.send) {
    outgoing_.push_back(local.narrow(dim, t.lo - i0, t.length()).contiguous());
    ops.push_back(P2POp::send(outgoing_.back(), static_cast<int>(t.peer), tag));
  }
  const Extent own = me.own_part();
  if (own.length > 0)
    window_.add(local.narrow(dim, own.offset - i0, own.length), at(nd, dim, own.offset - a));
  if (!ops.empty()) works_ = group.batch_isend_irecv(ops);
}

const TiledTensor& PendingWindow::wait() {
  if (!works_.empty()) {
    wait_all(works_);
    works_.clear();
  }
  outgoing_.clear();
  return window_;
}

TiledTensor gather_window_tiles(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                                ProcessGroup& group, int tag) {
  PendingWindow pending(local, dim, me, group, tag);
  return pending.wait();
}

Tensor gather_window(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                     ProcessGroup& group, int tag) {
  return gather_window_tiles(local, dim, me, group, tag).assemble();
}

WindowGradient::WindowGradient(const Shape& owned_shape, DType dtype, Device device,
                               std::int64_t dim, const HaloRankPlan& me)
    : dim_(dim), me_(me) {
  DTENSOR_CHECK_ARG(owned_shape[static_cast<std::size_t>(dim)] == me.input.length, "conv",
                    "halo exchange: owned extent {} along dim {} but the plan owns {}",
                    owned_shape[static_cast<std::size_t>(dim)], dim, me.input.length);
  const std::int64_t a = me.window.offset, i0 = me.input.offset;
  const std::size_t nd = owned_shape.size();
  const Extent own = me.own_part();
  // When the window covers the whole owned range the kernel writes every owned
  // position; otherwise the rest must start at 0.
  const bool covers = own.offset == i0 && own.length == me.input.length;
  grad_ = covers ? Tensor::empty(owned_shape, dtype, device)
                 : Tensor::zeros(owned_shape, dtype, device);
  window_ = TiledTensor(with_extent(owned_shape, dim, me.window.length), dtype, device);
  for (const auto& t : me.grad_send()) {
    outgoing_.push_back(Tensor::empty(with_extent(owned_shape, dim, t.length()), dtype, device));
    window_.add(outgoing_.back(), at(nd, dim, t.lo - a));
  }
  if (own.length > 0)
    window_.add(grad_.narrow(dim, own.offset - i0, own.length), at(nd, dim, own.offset - a));
}

void WindowGradient::post(ProcessGroup& group, int tag) {
  const std::int64_t i0 = me_.input.offset;
  std::vector<P2POp> ops;
  for (const auto& t : me_.grad_recv()) {
    incoming_.emplace_back(
        Tensor::empty(with_extent(grad_.shape(), dim_, t.length()), grad_.dtype(), grad_.device()),
        t.lo - i0);
    ops.push_back(P2POp::recv(incoming_.back().first, static_cast<int>(t.peer), tag));
  }
  const auto& sends = me_.grad_send();
  for (std::size_t i = 0; i < sends.size(); ++i)
    ops.push_back(P2POp::send(outgoing_[i], static_cast<int>(sends[i].peer), tag));
  if (!ops.empty()) works_ = group.batch_isend_irecv(ops);
}

Tensor WindowGradient::finish() {
  if (!works_.empty()) {
    wait_all(works_);
    works_.clear();
  }
  for (auto& [buf, off] : incoming_)
    grad_.narrow(dim_, off, buf.size(dim_)).add_(buf);
  incoming_.clear();
  outgoing_.clear();
  return grad_;
}

Tensor WindowGradient::finish(ProcessGroup& group, int tag) {
  post(group, tag);
  return finish();
}

Tensor scatter_add_window(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                          ProcessGroup& group, const Shape& owned_shape, int tag) {
  DTENSOR_CHECK_ARG(grad_window.size(dim) == me.window.length, "conv",
                    "halo exchange: gradient extent {} along dim {} but the window is {}",
                    grad_window.size(dim), dim, me.window.length);
  if (me.recv.empty() && me.send.empty() && me.window == me.input) return grad_window;
  WindowGradient g(owned_shape, grad_window.dtype(), grad_window.device(), dim, me);
  g.window().scatter(grad_window);
  return g.finish(group, tag);
}

}  // namespace dtensor::conv
