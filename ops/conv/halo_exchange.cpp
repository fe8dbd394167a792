#include "ops/conv/halo_exchange.h"

#include "dtensor/core/errors.h"

namespace dtensor::conv {
namespace {

Shape with_extent(Shape s, std::int64_t dim, std::int64_t len) {
  s[static_cast<std::size_t>(dim)] = len;
  return s;
}

// A destination for a message: the view itself when it is contiguous (the
// data lands in place), else a staging buffer copied in after the wait.
struct Landing {
  Tensor view;
  Tensor buffer;
  Tensor target() const { return buffer.defined() ? buffer : view; }
};
Landing landing_for(const Tensor& view) {
  return view.is_contiguous()
             ? Landing{view, {}}
             : Landing{view, Tensor::empty(view.shape(), view.dtype(), view.device())};
}

}  // namespace

Tensor gather_window(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                     ProcessGroup& group) {
  check_arg(local.size(dim) == me.input.length, "conv",
            "halo exchange: local extent {} along dim {} but the plan owns {}", local.size(dim),
            dim, me.input.length);
  const std::int64_t a = me.window.offset, i0 = me.input.offset;
  // The window is exactly the owned range and nobody needs anything from us
  // (P = 1, or stride == kernel on aligned shards): no copy, no traffic.
  if (me.recv.empty() && me.send.empty() && me.window == me.input) return local;
  if (me.recv.empty()) {
    // The window lies in the owned range: a view, after sending what others need.
    std::vector<Tensor> outgoing;
    std::vector<P2POp> ops;
    for (const auto& t : me.send) {
      outgoing.push_back(local.narrow(dim, t.lo - i0, t.length()).contiguous());
      ops.push_back(P2POp::send(outgoing.back(), static_cast<int>(t.peer)));
    }
    auto works = group.batch_isend_irecv(ops);
    wait_all(works);
    // An empty window (no output, or wholly in the padding) may sit anywhere.
    return me.window.length == 0 ? local.narrow(dim, 0, 0)
                                 : local.narrow(dim, a - i0, me.window.length);
  }
  Tensor window = Tensor::empty(with_extent(local.shape(), dim, me.window.length), local.dtype(),
                                local.device());
  std::vector<P2POp> ops;
  std::vector<Landing> landings;
  for (const auto& t : me.recv) {
    landings.push_back(landing_for(window.narrow(dim, t.lo - a, t.length())));
    ops.push_back(P2POp::recv(landings.back().target(), static_cast<int>(t.peer)));
  }
  std::vector<Tensor> outgoing;  // kept alive until the sends complete
  for (const auto& t : me.send) {
    outgoing.push_back(local.narrow(dim, t.lo - i0, t.length()).contiguous());
    ops.push_back(P2POp::send(outgoing.back(), static_cast<int>(t.peer)));
  }
  auto works = group.batch_isend_irecv(ops);
  const Extent own = me.own_part();
  if (own.length > 0)  // overlaps the transfers in flight
    window.narrow(dim, own.offset - a, own.length)
        .copy_(local.narrow(dim, own.offset - i0, own.length));
  wait_all(works);
  for (auto& l : landings)
    if (l.buffer.defined()) l.view.copy_(l.buffer);
  return window;
}

Tensor scatter_add_window(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                          ProcessGroup& group, const Shape& owned_shape) {
  check_arg(grad_window.size(dim) == me.window.length, "conv",
            "halo exchange: gradient extent {} along dim {} but the window is {}",
            grad_window.size(dim), dim, me.window.length);
  const std::int64_t a = me.window.offset, i0 = me.input.offset;
  if (me.recv.empty() && me.send.empty() && me.window == me.input) return grad_window;
  const Extent own = me.own_part();
  // When the window covers the whole owned range, the own part is copied in
  // (one pass) instead of zero-filling and adding (two).
  const bool covers = own.offset == i0 && own.length == me.input.length;
  Tensor grad = covers ? Tensor::empty(owned_shape, grad_window.dtype(), grad_window.device())
                       : Tensor::zeros(owned_shape, grad_window.dtype(), grad_window.device());
  std::vector<P2POp> ops;
  std::vector<std::pair<Tensor, std::int64_t>> incoming;  // buffer, offset in the owned range
  for (const auto& t : me.grad_recv()) {
    incoming.emplace_back(
        Tensor::empty(with_extent(owned_shape, dim, t.length()), grad.dtype(), grad.device()),
        t.lo - i0);
    ops.push_back(P2POp::recv(incoming.back().first, static_cast<int>(t.peer)));
  }
  std::vector<Tensor> outgoing;
  for (const auto& t : me.grad_send()) {
    outgoing.push_back(grad_window.narrow(dim, t.lo - a, t.length()).contiguous());
    ops.push_back(P2POp::send(outgoing.back(), static_cast<int>(t.peer)));
  }
  auto works = group.batch_isend_irecv(ops);
  if (covers)
    grad.copy_(grad_window.narrow(dim, own.offset - a, own.length));
  else if (own.length > 0)
    grad.narrow(dim, own.offset - i0, own.length)
        .add_(grad_window.narrow(dim, own.offset - a, own.length));
  wait_all(works);
  for (auto& [buf, off] : incoming)
    grad.narrow(dim, off, buf.size(dim)).add_(buf);
  return grad;
}

}  // namespace dtensor::conv
