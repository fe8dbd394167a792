#include "ops/window/run_exchange.h"

#include <map>

#include "dtensor/core/errors.h"

namespace dtensor::window {
namespace {

using Order = WindowRun::Order;

Shape with_extent(Shape s, std::int64_t dim, std::int64_t len) {
  s[static_cast<std::size_t>(dim)] = len;
  return s;
}

// Writes a run's sources (`src`, run.length() long along `dim`) into the window.
void write_run(const Tensor& window, std::int64_t dim, const WindowRun& run, const Tensor& src) {
  switch (run.order) {
    case Order::Forward:
      window.narrow(dim, run.dst, run.count).copy_(src);
      return;
    case Order::Reversed:
      for (std::int64_t t = 0; t < run.count; ++t)
        window.narrow(dim, run.dst + t, 1).copy_(src.narrow(dim, run.count - 1 - t, 1));
      return;
    case Order::Repeat:
      for (std::int64_t t = 0; t < run.count; ++t)
        window.narrow(dim, run.dst + t, 1).copy_(src);
      return;
  }
}

// The gradient a run's window positions give its sources (run.length() long).
Tensor run_gradient(const Tensor& grad_window, std::int64_t dim, const WindowRun& run) {
  if (run.order == Order::Forward) return grad_window.narrow(dim, run.dst, run.count);
  Tensor out = Tensor::zeros(with_extent(grad_window.shape(), dim, run.length()),
                             grad_window.dtype(), grad_window.device());
  for (std::int64_t t = 0; t < run.count; ++t) {
    const std::int64_t at = run.order == Order::Reversed ? run.count - 1 - t : 0;
    out.narrow(dim, at, 1).add_(grad_window.narrow(dim, run.dst + t, 1));
  }
  return out;
}

// Runs grouped by peer, in order; the total source length of each group.
std::map<std::int64_t, std::vector<const WindowRun*>> by_peer(const std::vector<WindowRun>& runs,
                                                              std::int64_t me) {
  std::map<std::int64_t, std::vector<const WindowRun*>> out;
  for (const auto& r : runs)
    if (r.peer != me) out[r.peer].push_back(&r);
  return out;
}

std::int64_t total_length(const std::vector<const WindowRun*>& runs) {
  std::int64_t n = 0;
  for (const auto* r : runs)
    n += r->length();
  return n;
}

// The window is a piece of the rank's own shard, in order: every run is its
// own and forward (a pool whose windows fit the shard, an interior rank with
// nothing to receive). Then the window is a view and costs no copy.
bool window_is_own_slice(const HaloRankPlan& me) {
  if (me.window.offset < me.input.offset || me.window.end() > me.input.end()) return false;
  for (const auto& r : me.runs)
    if (r.peer != me.rank || r.order != Order::Forward) return false;
  return true;
}

}  // namespace

Tensor gather_runs(const Tensor& local, std::int64_t dim, const HaloRankPlan& me,
                   ProcessGroup* group, int tag) {
  DTENSOR_CHECK_ARG(local.size(dim) == me.input.length, "window",
                    "window exchange: local extent {} along dim {} but the plan owns {}",
                    local.size(dim), dim, me.input.length);
  const std::int64_t i0 = me.input.offset;
  const bool own_slice = window_is_own_slice(me);
  Tensor window = own_slice ? local.narrow(dim, me.window.offset - i0, me.window.length)
                            : Tensor::empty(with_extent(local.shape(), dim, me.window.length),
                                            local.dtype(), local.device());
  std::vector<P2POp> ops;
  std::vector<std::pair<Tensor, std::vector<const WindowRun*>>> incoming;
  for (auto& [peer, runs] : by_peer(me.runs, me.rank)) {
    Tensor buf = Tensor::empty(with_extent(local.shape(), dim, total_length(runs)), local.dtype(),
                               local.device());
    ops.push_back(P2POp::recv(buf, static_cast<int>(peer), tag));
    incoming.emplace_back(buf, runs);
  }
  std::vector<Tensor> outgoing;
  for (auto& [peer, runs] : by_peer(me.run_sends, -1)) {
    Tensor buf = Tensor::empty(with_extent(local.shape(), dim, total_length(runs)), local.dtype(),
                               local.device());
    std::int64_t at = 0;
    for (const auto* r : runs) {
      buf.narrow(dim, at, r->length()).copy_(local.narrow(dim, r->lo - i0, r->length()));
      at += r->length();
    }
    outgoing.push_back(buf);
    ops.push_back(P2POp::send(buf, static_cast<int>(peer), tag));
  }
  std::vector<std::shared_ptr<Work>> works;
  if (!ops.empty()) {
    check_arg(group != nullptr, "window", "internal: a one-rank plan exchanges messages");
    works = group->batch_isend_irecv(ops);
  }
  // Own runs while the messages travel.
  if (!own_slice)
    for (const auto& r : me.runs)
      if (r.peer == me.rank) write_run(window, dim, r, local.narrow(dim, r.lo - i0, r.length()));
  wait_all(works);
  for (auto& [buf, runs] : incoming) {
    std::int64_t at = 0;
    for (const auto* r : runs) {
      write_run(window, dim, *r, buf.narrow(dim, at, r->length()));
      at += r->length();
    }
  }
  return window;
}

Tensor scatter_add_runs(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                        ProcessGroup* group, const Shape& owned_shape, int tag) {
  DTENSOR_CHECK_ARG(grad_window.size(dim) == me.window.length, "window",
                    "window exchange: gradient extent {} along dim {} but the window is {}",
                    grad_window.size(dim), dim, me.window.length);
  const std::int64_t i0 = me.input.offset;
  // The window is the whole shard and nothing arrives: the gradient is the
  // window's own (the others' strips still leave).
  const bool whole_own = window_is_own_slice(me) && me.window == me.input && me.run_sends.empty();
  // A run of this rank's own, in order, over the whole shard (a pad's or a
  // same-size window's interior) is copied rather than added to zeros: one
  // pass instead of a fill and a read-modify-write. The other runs add to it.
  const WindowRun* covering = nullptr;
  for (const auto& r : me.runs)
    if (!whole_own && !covering && r.peer == me.rank && r.order == Order::Forward && r.lo == i0 &&
        r.hi == i0 + owned_shape[static_cast<std::size_t>(dim)])
      covering = &r;
  Tensor grad = whole_own  ? grad_window
                : covering ? Tensor::empty(owned_shape, grad_window.dtype(), grad_window.device())
                                 .copy_(run_gradient(grad_window, dim, *covering))
                           : Tensor::zeros(owned_shape, grad_window.dtype(), grad_window.device());
  std::vector<P2POp> ops;
  std::vector<Tensor> outgoing;
  for (auto& [peer, runs] : by_peer(me.runs, me.rank)) {
    Tensor buf = Tensor::empty(with_extent(owned_shape, dim, total_length(runs)),
                               grad_window.dtype(), grad_window.device());
    std::int64_t at = 0;
    for (const auto* r : runs) {
      buf.narrow(dim, at, r->length()).copy_(run_gradient(grad_window, dim, *r));
      at += r->length();
    }
    outgoing.push_back(buf);
    ops.push_back(P2POp::send(buf, static_cast<int>(peer), tag));
  }
  std::vector<std::pair<Tensor, std::vector<const WindowRun*>>> incoming;
  for (auto& [peer, runs] : by_peer(me.run_sends, -1)) {
    Tensor buf = Tensor::empty(with_extent(owned_shape, dim, total_length(runs)),
                               grad_window.dtype(), grad_window.device());
    ops.push_back(P2POp::recv(buf, static_cast<int>(peer), tag));
    incoming.emplace_back(buf, runs);
  }
  std::vector<std::shared_ptr<Work>> works;
  if (!ops.empty()) {
    check_arg(group != nullptr, "window", "internal: a one-rank plan exchanges messages");
    works = group->batch_isend_irecv(ops);
  }
  if (!whole_own)
    for (const auto& r : me.runs)
      if (r.peer == me.rank && &r != covering)
        grad.narrow(dim, r.lo - i0, r.length()).add_(run_gradient(grad_window, dim, r));
  wait_all(works);
  for (auto& [buf, runs] : incoming) {
    std::int64_t at = 0;
    for (const auto* r : runs) {
      grad.narrow(dim, r->lo - i0, r->length()).add_(buf.narrow(dim, at, r->length()));
      at += r->length();
    }
  }
  return grad;
}

}  // namespace dtensor::window
