// A chain of convolutions, group and batch norms, activations, pools,
// upsamples and transposed convolutions with one halo exchange
// (dtensor/ops/halo_chain.h): the operators "halo_chain" and
// "halo_chain_backward", the autograd node that joins them, and the
// library's entry points. The rest, one part to a file: the layers as the
// handlers read them (halo_chain_layers.h), what cannot be fused
// (halo_chain_refusal.h), the plan of one dim (halo_chain_plan.h), the
// rank's geometry (halo_chain_geometry.h), the other window layers
// (halo_chain_layer_ops.h), what the handlers share (halo_chain_run.h), the
// handlers (halo_chain_forward.cpp, halo_chain_backward.cpp) and the cost
// model (halo_chain_cost.cpp).
//
// Forward, on each rank: one WindowExchange brings the chain's combined halo
// (the chain read as one sliding window, halo_chain_plan.h); every
// convolution then computes the range the layers after it read (its local
// padding supplies the zeros beyond the input's edges), every norm takes its
// statistics from the cells the rank owns only (so they are the unfused
// run's; a batch norm's over the batch too, and in eval mode it is
// element-wise with its running statistics) and normalises the whole range;
// a pool reduces the taps each
// output reads (named by global position, so its padding is the unfused
// run's without any local padding), as does an upsample (its taps by
// global position too); a transposed convolution computes its held input's
// whole output (a convolution's backward-data) and keeps its range, and its
// backward convolves the range's gradient laid into that whole output's
// shape; an activation is element-wise,
// so it runs on the whole range by its operator's own kernel (the backward
// too: a halo cell's gradient part times the derivative there is this
// rank's part of the cell's). With a halo along one dim only (and no layer
// that resamples), the first convolution's outputs that read none of it
// run while it travels (halo_chain_plan.h, chain_interior). When the statistics cross ranks
// the batch runs in two pieces (batch_pieces): a piece posts its statistics
// and the other piece computes while they travel. What the backward needs
// (the window, every layer's input, the statistics) stays on the rank, in
// the node's state: nothing is exchanged again but the gradient.
//
// Backward: the gradient starts on the owned cells and widens layer by layer
// backwards. Inside the window a halo cell's gradient is this rank's part of
// the total (its neighbour holds the rest), so the norms' two gradient sums
// run over every cell of the range (the parts add up across ranks), and the
// term that depends on them is added on owned cells only (once per cell
// across ranks). A norm's sums are posted, piece by piece, as soon as the
// gradient reaching it exists, and each piece's are collected just before
// that piece's backward-data: the other piece's work, and the convolution's
// weight gradient between a norm begun by the convolution after it and the
// next, hide the waits. The first convolution writes the window's gradient
// straight into the shard's gradient and the strips that go back: one
// exchange.
#include "dtensor/ops/halo_chain.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/registry.h"
#include "ops/window/halo_chain_call.h"
#include "ops/window/halo_chain_layers.h"
#include "ops/window/halo_chain_refusal.h"
#include "ops/window/halo_chain_run.h"

namespace dtensor {
namespace {

using halo::kBackwardOp;
using halo::kForwardOp;
using halo::chain::Chain;
using halo::chain::chain_of;
using halo::chain::ChainState;
using halo::chain::Layer;
using halo::chain::StateScope;

// ---- definitions -----------------------------------------------------------

void validate(const OpSchema& s, bool backward) {
  const DTensor& x =
      backward ? decoded<halo::ChainBackwardCall>(s).input : decoded<halo::ChainCall>(s).input;
  const auto& layers =
      backward ? decoded<halo::ChainBackwardCall>(s).layers : decoded<halo::ChainCall>(s).layers;
  chain_of(s, backward);  // a layer that does not fit the input's rank, named
  const auto why = halo::chain::refusal(x, layers);
  DTENSOR_CHECK_ARG(!why, s.op(), "cannot run as one exchange: {}", why.value_or(""));
}

Placements partial_where_sharded(const Placements& x) {
  Placements out;
  for (const Placement& p : x)
    out.push_back(p.is_shard() ? Placement::partial() : Placement::replicate());
  return out;
}

void register_chain() {
  OpDef fwd;
  fwd.name = kForwardOp;
  fwd.validate = [](const OpSchema& s) { validate(s, false); };
  // The output, then each updating batch norm's running mean and variance.
  fwd.output_meta = [](const OpSchema& s) {
    const Chain& c = chain_of(s, false);
    std::vector<TensorMeta> out{{c.output_shape, s.dtensor(0).dtype()}};
    for (const Layer& l : c.layers)
      if (l.running_output >= 0)
        for (const int t : {l.running_mean, l.running_var}) {
          const DTensor& stat = s.dtensor(s.dtensor_positions()[static_cast<std::size_t>(t)]);
          out.push_back({stat.shape(), stat.dtype()});
        }
    return out;
  };
  fwd.strategies = [](const OpSchema& s) {
    const Placements& x = s.dtensor(0).placements();
    const Placements replicated(x.size(), Placement::replicate());
    ShardingStrategy st;
    st.inputs.push_back(x);
    for (std::size_t i = 1; i < s.dtensor_positions().size(); ++i)
      st.inputs.push_back(replicated);
    st.outputs.push_back(x);
    for (int k = 0; k < 2 * chain_of(s, false).num_running; ++k)
      st.outputs.push_back(replicated);
    return std::vector<ShardingStrategy>{st};
  };
  register_op(fwd);
  OpDef bwd;
  bwd.name = kBackwardOp;
  bwd.validate = [](const OpSchema& s) { validate(s, true); };
  bwd.output_meta = [](const OpSchema& s) {
    std::vector<TensorMeta> out;
    const auto& pos = s.dtensor_positions();
    for (std::size_t i = 1; i < pos.size(); ++i)
      out.push_back({s.dtensor(pos[i]).shape(), s.dtensor(pos[i]).dtype()});
    return out;
  };
  bwd.strategies = [](const OpSchema& s) {
    const auto& pos = s.dtensor_positions();
    const Placements& x = s.dtensor(pos[1]).placements();
    ShardingStrategy st;
    st.inputs = {x, x};
    st.outputs = {x};
    for (std::size_t i = 2; i < pos.size(); ++i) {
      st.inputs.emplace_back(x.size(), Placement::replicate());
      st.outputs.push_back(partial_where_sharded(x));
    }
    return std::vector<ShardingStrategy>{st};
  };
  bwd.differentiable = false;
  register_op(bwd);
  HandlerOptions options;
  options.defers_agreement = true;
  register_op_handler(kForwardOp, halo::chain::forward_handler, false, options);
  register_op_handler(kBackwardOp, halo::chain::backward_handler, false, options);
}

struct Registrar {
  Registrar() { register_chain(); }
};
const Registrar registrar;

// ---- autograd --------------------------------------------------------------

std::vector<DTensor> dtensors_of(const std::vector<OpArg>& args) {
  std::vector<DTensor> out;
  for (const auto& a : args)
    if (const auto* d = std::get_if<DTensor>(&a)) out.push_back(*d);
  return out;
}

class ChainNode final : public autograd::Node {
 public:
  ChainNode(std::vector<OpArg> args, std::shared_ptr<ChainState> state)
      : Node(kForwardOp, dtensors_of(args), 1), state_(std::move(state)) {
    for (auto& a : args)
      if (auto* d = std::get_if<DTensor>(&a)) *d = d->detach();
    args_ = std::move(args);
  }

  std::vector<std::optional<DTensor>> apply(
      const std::vector<std::optional<DTensor>>& grad_outputs) override {
    DTENSOR_CHECK_ARG(state_ != nullptr, "autograd",
                      "backward through {} a second time: its saved tensors were freed after the "
                      "first backward (pass retain_graph=true to keep them)",
                      name());
    std::vector<std::optional<DTensor>> out(next_edges().size());
    if (!grad_outputs.at(0)) return out;
    std::vector<OpArg> args = args_;
    args.insert(args.begin() + 1, !next_edges().at(0).empty());  // after x: its gradient wanted?
    args.insert(args.begin(), *grad_outputs[0]);
    StateScope scope(state_.get());
    const auto grads = dispatch(kBackwardOp, std::move(args));
    for (std::size_t i = 0; i < out.size(); ++i)
      if (!next_edges()[i].empty()) out[i] = grads.at(i);
    return out;
  }

  void release_saved() override {
    state_.reset();
    args_.clear();
  }

 private:
  std::shared_ptr<ChainState> state_;
  std::vector<OpArg> args_;
};

}  // namespace

std::optional<std::string> halo_chain_refusal(const DTensor& input,
                                              const std::vector<ChainLayer>& layers) {
  return halo::chain::refusal(input, layers);
}

std::optional<std::string> halo_chain_input_refusal(const DTensor& input) {
  return halo::chain::input_refusal(input);
}

bool halo_chain_pays(const DTensor& input, const std::vector<ChainLayer>& layers) {
  if (!config().halo_fusion) return false;
  // The price before the plan's rules: most chains a deep Sequential tries
  // do not pay, and pricing one reads its geometry once where the plan's
  // rules simulate every norm on every dim.
  halo::chain::ChainGeometry geometry;
  return !halo::chain::layer_refusal(input, layers, geometry) &&
         halo_chain_saving(input, layers) > 0 && !halo::chain::plan_refusal(input, geometry);
}

HaloChainResult halo_chain_updating(const DTensor& input, const std::vector<ChainLayer>& layers) {
  const auto why = halo_chain_refusal(input, layers);
  DTENSOR_CHECK_ARG(!why, kForwardOp, "cannot run as one exchange: {}", why.value_or(""));
  // A pool's lists spelled out for the input's spatial dims (a
  // convolution's follow its weight), so equal chains have equal keys.
  std::vector<ChainLayer> spelled = layers;
  for (ChainLayer& layer : spelled)
    if (auto* pool = std::get_if<ChainPool>(&layer))
      pool->params = pool->params.expanded(input.ndim() - 2);
  std::vector<OpArg> args = halo::ChainCall::Fields::encode(input, spelled);
  bool record = is_grad_enabled();
  if (record)
    record = std::any_of(args.begin(), args.end(), [](const OpArg& a) {
      const auto* d = std::get_if<DTensor>(&a);
      return d && d->requires_grad();
    });
  auto state = std::make_shared<ChainState>();
  state->save = record;
  std::vector<DTensor> outs = [&] {
    StateScope scope(state.get());
    NoGradGuard no_grad;
    return dispatch(kForwardOp, args);
  }();
  HaloChainResult result{outs.at(0), {}};
  for (std::size_t i = 1; i + 1 < outs.size(); i += 2)
    result.running_stats.emplace_back(outs[i], outs[i + 1]);
  if (record)
    result.output = autograd::attach(std::make_shared<ChainNode>(std::move(args), std::move(state)),
                                     {result.output})
                        .at(0);
  return result;
}

DTensor halo_chain(const DTensor& input, const std::vector<ChainLayer>& layers) {
  // Updated running statistics would be lost here, silently.
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto* b = std::get_if<ChainBatchNorm>(&layers[i]);
    DTENSOR_CHECK_ARG(!b || !b->updates_running_stats(), kForwardOp,
                      "layers: layer {} is a batch norm in training with running statistics, "
                      "which halo_chain_updating() returns updated (halo_chain() would drop them)",
                      i);
  }
  return halo_chain_updating(input, layers).output;
}

}  // namespace dtensor
