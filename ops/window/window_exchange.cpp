// WindowExchange: the engine's plan for every spatial dim of one call, run
// over the call's groups. Sharded dims are planned over the ranks of the
// mesh dim that shards them and gathered in mesh-dim order (a later dim's
// exchange sends slices of the earlier dims' windows: that is how corners
// travel); a dim no mesh dim shards is planned over one rank, which costs
// nothing unless its boundary must be materialised.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/window.h"
#include "ops/deferred_agreement.h"
#include "ops/window/halo_plan.h"
#include "ops/window/run_exchange.h"

namespace dtensor {

struct WindowExchange::Dim {
  std::int64_t tensor_dim;
  std::shared_ptr<const HaloPlan> plan;  // shared_halo_plan: built once per window
  std::int64_t index;                    // this rank's row of the plan
  ProcessGroup* group;                   // null for a dim no mesh dim shards
  Shape owned_before;                    // the tensor's shape before this dim's gather
  const HaloRankPlan& me() const { return plan->rank(index); }
  // Nothing to do: an unsharded, zero-padded dim (the window is the shard).
  bool trivial() const {
    return !group && plan->dim().boundary == Boundary::Zeros && me().window == me().input;
  }
};

WindowExchange::WindowExchange(OpCall& call, const DTensorSpec& input, std::vector<WindowDim> dims,
                               int stream)
    : call_(call),
      stream_(stream),
      local_shape_(input.local_shape()),
      dtype_(input.dtype()),
      device_(input.mesh().device()) {
  const std::int64_t spatial = input.ndim() - 2;
  DTENSOR_CHECK_ARG(spatial >= 1 && spatial <= 3, "window",
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(input.shape()));
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(dims.size()) == spatial, "window",
                    "dims: {} window dims given for {} spatial dims", dims.size(), spatial);
  const DeviceMesh& mesh = input.mesh();
  const auto& coord = *mesh.get_coordinate();
  // Which mesh dim shards each spatial dim (-1: none).
  std::vector<std::int64_t> sharded_by(static_cast<std::size_t>(spatial), -1);
  for (std::int64_t m = 0; m < mesh.ndim(); ++m) {
    const Placement& pl = input.placements()[static_cast<std::size_t>(m)];
    if (!pl.is_shard() || pl.dim() < 2) continue;
    auto& by = sharded_by[static_cast<std::size_t>(pl.dim() - 2)];
    DTENSOR_CHECK_ARG(
        by < 0, "window",
        "placements: spatial dim {} is sharded on mesh dims {} and {}; a window operator "
        "needs each spatial dim on one mesh dim at most",
        pl.dim(), by, m);
    by = m;
  }
  // Sharded dims in mesh order first, then the others.
  std::vector<std::int64_t> order;
  for (std::int64_t m = 0; m < mesh.ndim(); ++m)
    for (std::int64_t sd = 0; sd < spatial; ++sd)
      if (sharded_by[static_cast<std::size_t>(sd)] == m) order.push_back(sd);
  for (std::int64_t sd = 0; sd < spatial; ++sd)
    if (sharded_by[static_cast<std::size_t>(sd)] < 0) order.push_back(sd);

  spans_.resize(static_cast<std::size_t>(spatial));
  Shape shape = local_shape_;
  for (std::int64_t sd : order) {
    const std::int64_t td = sd + 2, m = sharded_by[static_cast<std::size_t>(sd)];
    const std::int64_t P = m < 0 ? 1 : mesh.size(m);
    auto d = std::make_unique<Dim>(Dim{td,
                                       shared_halo_plan(input.shape()[static_cast<std::size_t>(td)],
                                                        P, dims[static_cast<std::size_t>(sd)]),
                                       m < 0 ? 0 : coord[static_cast<std::size_t>(m)],
                                       m < 0 ? nullptr : &call.group(m), shape});
    const HaloRankPlan& me = d->me();
    has_output_ = has_output_ && me.has_output;
    spans_[static_cast<std::size_t>(sd)] = {
        td, me.output, me.window.offset, me.window.length, me.pad_left, me.pad_right};
    shape[static_cast<std::size_t>(td)] = me.window.length;
    dims_.push_back(std::move(d));
  }
}

WindowExchange::~WindowExchange() = default;

Shape WindowExchange::local_output_shape(std::int64_t batch, std::int64_t channels) const {
  Shape out{batch, channels};
  for (const auto& s : spans_)
    out.push_back(s.output.length);
  return out;
}

// A rank whose window needs no messages confirms the call's agreement check
// at once instead of after its compute: the check's 24-byte messages are in
// flight from dispatch, and waiting for them now costs one round trip, while
// waiting after the compute costs the peers' skew plus the wake-ups of
// transport threads that could not run on a core busy with the compute
// (measured: pad at P = 2 took 2.5-6x its local time that way). Inside
// backward(), where dispatch leaves such a call's check to be confirmed
// later (ops/deferred_agreement.h), it is not waited for at all.
void WindowExchange::confirm_if_silent() {
  if (detail::agreements_deferred()) return;
  for (const auto& d : dims_)
    if (d->group && (!d->me().run_sends.empty() ||
                     std::any_of(d->me().runs.begin(), d->me().runs.end(),
                                 [&](const WindowRun& r) { return r.peer != d->me().rank; })))
      return;
  call_.confirm_agreement();
}

Shape WindowExchange::local_window_shape() const {
  Shape out = local_shape_;
  for (const auto& s : spans_)
    out[static_cast<std::size_t>(s.tensor_dim)] = s.length;
  return out;
}

std::size_t WindowExchange::last_live_dim() const {
  for (std::size_t i = dims_.size(); i-- > 0;)
    if (!dims_[i]->trivial()) return i;
  return dims_.size();
}

struct WindowExchange::Pending::State {
  std::optional<window::PendingRuns> runs;
  TiledTensor done;  // when no dim's exchange does anything
};

WindowExchange::Pending::Pending(std::unique_ptr<State> state) : state_(std::move(state)) {}
WindowExchange::Pending::Pending(Pending&&) noexcept = default;
WindowExchange::Pending& WindowExchange::Pending::operator=(Pending&&) noexcept = default;
WindowExchange::Pending::~Pending() = default;

const TiledTensor& WindowExchange::Pending::window() const {
  return state_->runs ? state_->runs->window() : state_->done;
}

const TiledTensor& WindowExchange::Pending::wait() {
  return state_->runs ? state_->runs->wait() : state_->done;
}

WindowExchange::Pending WindowExchange::post(const Tensor& local) {
  DTENSOR_CHECK_ARG(local.shape() == local_shape_, "window",
                    "internal: local input {} but the spec's shard is {}", shape_str(local.shape()),
                    shape_str(local_shape_));
  confirm_if_silent();
  auto state = std::make_unique<Pending::State>();
  const std::size_t last = last_live_dim();
  if (last == dims_.size()) {
    state->done = TiledTensor::whole(local);
    return Pending(std::move(state));
  }
  // The earlier dims' windows, as tiles: the next dim's exchange sends
  // slices of them (that is how corners travel), and nothing is assembled
  // until a kernel asks (a pad's reflected window is then copied once, not
  // once per dim).
  TiledTensor x = TiledTensor::whole(local);
  for (std::size_t i = 0; i < last; ++i)
    if (!dims_[i]->trivial()) {
      window::PendingRuns earlier(x, dims_[i]->tensor_dim, dims_[i]->me(), dims_[i]->group,
                                  stream_);
      x = earlier.wait();
    }
  const Dim& d = *dims_[last];
  state->runs.emplace(x, d.tensor_dim, d.me(), d.group, stream_);
  return Pending(std::move(state));
}

Tensor WindowExchange::gather(const Tensor& local) {
  return post(local).wait().assemble();
}

struct WindowExchange::Gradient::State {
  const WindowExchange* engine;
  int stream;
  std::size_t last;                         // the dim written in place
  std::optional<window::RunGradient> runs;  // its exchange
  TiledTensor whole_window;                 // when no dim's exchange does anything
  Tensor whole;
  bool posted = false;
};

WindowExchange::Gradient::Gradient(std::unique_ptr<State> state) : state_(std::move(state)) {}
WindowExchange::Gradient::Gradient(Gradient&&) noexcept = default;
WindowExchange::Gradient& WindowExchange::Gradient::operator=(Gradient&&) noexcept = default;
WindowExchange::Gradient::~Gradient() = default;

const TiledTensor& WindowExchange::Gradient::window() const {
  return state_->runs ? state_->runs->window() : state_->whole_window;
}

void WindowExchange::Gradient::post() {
  if (state_->posted) return;
  state_->posted = true;
  if (state_->runs) {
    const Dim& d = *state_->engine->dims_[state_->last];
    state_->runs->post(d.group, state_->stream);
  }
}

Tensor WindowExchange::Gradient::finish() {
  post();
  if (!state_->runs) return state_->whole;
  // The earlier dims' parts go back in reverse order, each added where it belongs.
  return state_->engine->return_to_owners(state_->runs->finish(), state_->last, state_->stream);
}

WindowExchange::Gradient WindowExchange::gradient(int stream) {
  confirm_if_silent();
  auto state = std::make_unique<Gradient::State>();
  state->engine = this;
  state->stream = stream < 0 ? stream_ : stream;
  state->last = last_live_dim();
  if (state->last == dims_.size()) {
    state->whole = Tensor::empty(local_window_shape(), dtype_, device_);
    state->whole_window = TiledTensor::whole(state->whole);
  } else {
    const Dim& d = *dims_[state->last];
    state->runs.emplace(d.owned_before, dtype_, device_, d.tensor_dim, d.me());
  }
  return Gradient(std::move(state));
}

Tensor WindowExchange::return_to_owners(Tensor g, std::size_t end, int stream) const {
  for (std::size_t i = end; i-- > 0;) {
    const Dim& d = *dims_[i];
    if (!d.trivial())
      g = window::scatter_add_runs(g, d.tensor_dim, d.me(), d.group, d.owned_before, stream);
  }
  return g;
}

Tensor WindowExchange::scatter_add(const Tensor& window_grad) {
  confirm_if_silent();
  return return_to_owners(window_grad, dims_.size(), stream_);
}

}  // namespace dtensor
