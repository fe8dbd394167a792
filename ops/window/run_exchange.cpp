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

// Where a tile starts in the window: `pos` along `dim`, 0 elsewhere.
Shape at(std::size_t ndim, std::int64_t dim, std::int64_t pos) {
  Shape o(ndim, 0);
  o[static_cast<std::size_t>(dim)] = pos;
  return o;
}

// Writes a run's window positions into `tile` (run.count long along `dim`)
// from its sources `src` (run.length() long).
void fill_run(Tensor tile, std::int64_t dim, const WindowRun& run, const Tensor& src) {
  switch (run.order) {
    case Order::Forward:
      tile.copy_(src);
      return;
    case Order::Reversed:
      for (std::int64_t t = 0; t < run.count; ++t)
        tile.narrow(dim, t, 1).copy_(src.narrow(dim, run.count - 1 - t, 1));
      return;
    case Order::Repeat:
      for (std::int64_t t = 0; t < run.count; ++t)
        tile.narrow(dim, t, 1).copy_(src);
      return;
  }
}

// The gradient a run's window positions (`tile`, run.count long) give its
// sources (run.length() long).
Tensor source_gradient(const Tensor& tile, std::int64_t dim, const WindowRun& run) {
  if (run.order == Order::Forward) return tile;
  Tensor out =
      Tensor::empty(with_extent(tile.shape(), dim, run.length()), tile.dtype(), tile.device());
  if (run.order == Order::Reversed) {
    for (std::int64_t t = 0; t < run.count; ++t)
      out.narrow(dim, run.count - 1 - t, 1).copy_(tile.narrow(dim, t, 1));
    return out;
  }
  out.copy_(tile.narrow(dim, 0, 1));
  for (std::int64_t t = 1; t < run.count; ++t)
    out.add_(tile.narrow(dim, t, 1));
  return out;
}

// Runs grouped by peer, in order, leaving out `me`'s own.
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

std::vector<std::shared_ptr<Work>> post_all(const std::vector<P2POp>& ops, ProcessGroup* group) {
  if (ops.empty()) return {};
  check_arg(group != nullptr, "window", "internal: a one-rank plan exchanges messages");
  return group->batch_isend_irecv(ops);
}

// The own in-order run the backward writes in place: the longest (with
// Boundary::Zeros the only one). Null when the rank has none.
const WindowRun* in_place_run(const HaloRankPlan& me) {
  const WindowRun* best = nullptr;
  for (const auto& r : me.runs)
    if (r.peer == me.rank && r.order == Order::Forward && (!best || r.count > best->count))
      best = &r;
  return best;
}

}  // namespace

PendingRuns::PendingRuns(const TiledTensor& local, std::int64_t dim, const HaloRankPlan& me,
                         ProcessGroup* group, int tag)
    : dim_(dim) {
  const auto d = static_cast<std::size_t>(dim);
  DTENSOR_CHECK_ARG(local.shape()[d] == me.input.length, "window",
                    "window exchange: local extent {} along dim {} but the plan owns {}",
                    local.shape()[d], dim, me.input.length);
  const std::int64_t i0 = me.input.offset;
  window_ =
      TiledTensor(with_extent(local.shape(), dim, me.window.length), local.dtype(), local.device());
  auto buffer = [&](std::int64_t len) {
    return Tensor::empty(with_extent(local.shape(), dim, len), local.dtype(), local.device());
  };
  std::vector<P2POp> ops;
  for (const auto& [peer, runs] : by_peer(me.runs, me.rank)) {
    Tensor buf = buffer(total_length(runs));
    ops.push_back(P2POp::recv(buf, static_cast<int>(peer), tag));
    std::int64_t pos = 0;
    for (const auto* r : runs) {
      Tensor src = buf.narrow(dim, pos, r->length());
      pos += r->length();
      if (r->order == Order::Forward) {
        window_.add(src, at(local.shape().size(), dim, r->dst));
      } else {
        unpack_.push_back({src, r, buffer(r->count)});
        window_.add(unpack_.back().tile, at(local.shape().size(), dim, r->dst));
      }
    }
  }
  for (const auto& [peer, runs] : by_peer(me.run_sends, -1)) {
    Tensor buf = buffer(total_length(runs));
    std::int64_t pos = 0;
    for (const auto* r : runs) {
      local.narrow(dim, r->lo - i0, r->length()).copy_to(buf.narrow(dim, pos, r->length()));
      pos += r->length();
    }
    outgoing_.push_back(buf);
    ops.push_back(P2POp::send(buf, static_cast<int>(peer), tag));
  }
  works_ = post_all(ops, group);
  // Own runs while the messages travel: in order, the tiles where they lie.
  for (const auto& r : me.runs) {
    if (r.peer != me.rank) continue;
    const TiledTensor src = local.narrow(dim, r.lo - i0, r.length());
    if (r.order == Order::Forward) {
      for (const auto& t : src.tiles()) {
        Shape offset = t.offset;
        offset[d] += r.dst;
        window_.add(t.data, offset);
      }
    } else {
      Tensor tile = buffer(r.count);
      fill_run(tile, dim, r, src.assemble());
      window_.add(tile, at(local.shape().size(), dim, r.dst));
    }
  }
}

const TiledTensor& PendingRuns::wait() {
  if (!works_.empty()) {
    wait_all(works_);
    works_.clear();
  }
  for (const auto& u : unpack_)
    fill_run(u.tile, dim_, *u.run, u.source);
  unpack_.clear();
  outgoing_.clear();
  return window_;
}

RunGradient::RunGradient(const Shape& owned_shape, DType dtype, Device device, std::int64_t dim,
                         const HaloRankPlan& me)
    : dim_(dim), me_(me) {
  DTENSOR_CHECK_ARG(owned_shape[static_cast<std::size_t>(dim)] == me.input.length, "window",
                    "window exchange: owned extent {} along dim {} but the plan owns {}",
                    owned_shape[static_cast<std::size_t>(dim)], dim, me.input.length);
  const std::int64_t i0 = me.input.offset;
  const std::size_t nd = owned_shape.size();
  auto buffer = [&](std::int64_t len) {
    return Tensor::empty(with_extent(owned_shape, dim, len), dtype, device);
  };
  // When the in-place run covers the whole owned range the kernel writes
  // every owned position: one pass instead of a fill and a read-modify-write.
  const WindowRun* direct = in_place_run(me);
  const bool covers = direct && direct->lo == i0 && direct->count == me.input.length;
  grad_ = covers ? Tensor::empty(owned_shape, dtype, device)
                 : Tensor::zeros(owned_shape, dtype, device);
  window_ = TiledTensor(with_extent(owned_shape, dim, me.window.length), dtype, device);
  if (direct)
    window_.add(grad_.narrow(dim, direct->lo - i0, direct->count), at(nd, dim, direct->dst));
  for (const auto& [peer, runs] : by_peer(me.runs, me.rank)) {
    Tensor buf = buffer(total_length(runs));
    std::vector<Piece> pieces;
    std::int64_t pos = 0;
    for (const auto* r : runs) {
      Tensor dst = buf.narrow(dim, pos, r->length());
      pos += r->length();
      if (r->order == Order::Forward) {
        window_.add(dst, at(nd, dim, r->dst));
      } else {
        pieces.push_back({r, buffer(r->count), dst});
        window_.add(pieces.back().tile, at(nd, dim, r->dst));
      }
    }
    outgoing_.emplace_back(peer, buf);
    outgoing_pieces_.push_back(std::move(pieces));
  }
  for (const auto& r : me.runs)
    if (r.peer == me.rank && &r != direct) {
      own_pieces_.push_back({&r, buffer(r.count), grad_.narrow(dim, r.lo - i0, r.length())});
      window_.add(own_pieces_.back().tile, at(nd, dim, r.dst));
    }
}

void RunGradient::post(ProcessGroup* group, int tag) {
  for (auto& pieces : outgoing_pieces_)
    for (auto& p : pieces)
      p.target.copy_(source_gradient(p.tile, dim_, *p.run));
  outgoing_pieces_.clear();
  std::vector<P2POp> ops;
  for (const auto& [peer, runs] : by_peer(me_.run_sends, -1)) {
    incoming_.emplace_back(Tensor::empty(with_extent(grad_.shape(), dim_, total_length(runs)),
                                         grad_.dtype(), grad_.device()),
                           runs);
    ops.push_back(P2POp::recv(incoming_.back().first, static_cast<int>(peer), tag));
  }
  for (const auto& [peer, buf] : outgoing_)
    ops.push_back(P2POp::send(buf, static_cast<int>(peer), tag));
  works_ = post_all(ops, group);
  // The own runs' other parts while the messages travel.
  for (auto& p : own_pieces_)
    p.target.add_(source_gradient(p.tile, dim_, *p.run));
  own_pieces_.clear();
}

Tensor RunGradient::finish() {
  if (!works_.empty()) {
    wait_all(works_);
    works_.clear();
  }
  const std::int64_t i0 = me_.input.offset;
  for (auto& [buf, runs] : incoming_) {
    std::int64_t pos = 0;
    for (const auto* r : runs) {
      grad_.narrow(dim_, r->lo - i0, r->length()).add_(buf.narrow(dim_, pos, r->length()));
      pos += r->length();
    }
  }
  incoming_.clear();
  outgoing_.clear();
  return grad_;
}

Tensor scatter_add_runs(const Tensor& grad_window, std::int64_t dim, const HaloRankPlan& me,
                        ProcessGroup* group, const Shape& owned_shape, int tag) {
  DTENSOR_CHECK_ARG(grad_window.size(dim) == me.window.length, "window",
                    "window exchange: gradient extent {} along dim {} but the window is {}",
                    grad_window.size(dim), dim, me.window.length);
  // The window is the whole shard, in order, and nothing arrives or leaves:
  // the gradient is the window's own.
  const bool whole_own = me.run_sends.empty() && me.window == me.input && me.runs.size() == 1 &&
                         me.runs[0].peer == me.rank && me.runs[0].order == Order::Forward;
  if (whole_own) return grad_window;
  RunGradient gradient(owned_shape, grad_window.dtype(), grad_window.device(), dim, me);
  gradient.window().scatter(grad_window);
  gradient.post(group, tag);
  return gradient.finish();
}

}  // namespace dtensor::window
