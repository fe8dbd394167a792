// The backward of a halo chain (halo_chain.h): the gradient widens layer by
// layer backwards through the window and goes back in one exchange
// (halo_chain.cpp says how).
#include <optional>

#include "dtensor/ops/kernels/channel.h"
#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/kernels/upsample.h"
#include "ops/window/conv_transpose_call.h"
#include "ops/window/halo_chain_geometry.h"
#include "ops/window/halo_chain_layer_ops.h"
#include "ops/window/halo_chain_run.h"
#include "ops/window/held_padding.h"

namespace dtensor::halo::chain {
namespace {

// A norm's backward begun: its sums taken on this rank and on their way to
// the others (begin_norm_backward), to be finished by finish_norm_backward.
struct NormBackward {
  const Layer* layer = nullptr;
  NormState state;  // the piece's
  Tensor g, weight, relu_output;
  kernels::NormLayout layout;
  std::optional<norm::PendingMerge> sums;
};

// The backward's first pass over the norm's range, from `g` (the output's
// gradient over the same range; this rank's part of it at halo cells), and
// its sums posted to the other ranks.
NormBackward begin_norm_backward(OpCall& call, const norm::ReductionPlan& reduction, const Layer& l,
                                 const NormState& ns, const Tensor& g, const Tensor& weight) {
  NormBackward b;
  b.layer = &l;
  b.state = ns;
  b.g = g;
  b.weight = weight;
  b.relu_output = l.relu ? ns.output : Tensor();
  b.layout = layout_over(l, ns.input);
  Tensor packed = Tensor::empty({b.layout.stats(), 5}, DType::F64);
  run_kernel(kernels::kNormBackwardReduce, g.device().type, g.dtype(),
             {g, ns.input, b.layout, weight, packed, b.relu_output});
  // The sums over every cell of every rank's range add up to the totals
  // (a halo cell's gradient parts are spread over the ranks that hold it).
  b.sums.emplace(call, reduction, std::move(packed),
                 norm::PendingMerge::Records::MomentsAndGradSums, kStatsStream);
  return b;
}

// The norm's input gradient over its range, once its sums have arrived,
// written into `grad_input` (contiguous, the input's shape).
void finish_norm_backward(NormBackward& b, const Geometry& geo, int k, const Tensor& grad_input,
                          Tensor* grad_weight, Tensor* grad_bias) {
  const Tensor& g = b.g;
  const NormState& ns = b.state;
  const Layer& l = *b.layer;
  const DeviceType device = g.device().type;
  const DType dtype = g.dtype();
  const auto& layout = b.layout;
  const Tensor& relu_output = b.relu_output;
  const Tensor& packed = b.sums->finish();
  kernels::NormBackwardApplyArgs args;
  args.grad_output = g;
  args.x = ns.input;
  args.layout = layout;
  args.mean = ns.stats.mean;
  args.invstd = ns.stats.invstd;
  args.weight = b.weight;
  args.relu_output = relu_output;
  norm::GradMeans means = norm::grad_means(packed, ns.stats);
  args.mean_g = std::move(means.mean_g);
  args.mean_gxhat = std::move(means.mean_gxhat);
  args.grad_input = grad_input;
  if (grad_weight)
    args.grad_weight = *grad_weight = Tensor::empty({layout.params()}, dtype, g.device());
  if (grad_bias) args.grad_bias = *grad_bias = Tensor::empty({layout.params()}, dtype, g.device());
  run_kernel(kernels::kNormBackwardApply, device, dtype, args);
  if (geo.owns_all(k)) return;
  // Halo cells: the statistics' term belongs to the owner alone; here only
  // g * w * invstd (the statistics held constant). The halo is a few slabs
  // around the owned box: each is recomputed on its own, in place.
  kernels::NormBackwardApplyArgs halo = args;
  halo.mean_g = Tensor();
  halo.mean_gxhat = Tensor();
  halo.grad_weight = Tensor();
  halo.grad_bias = Tensor();
  // Each tensor cut once: the slabs of one are views built in one pass.
  const std::vector<Tensor> outs = geo.halo_slabs(args.grad_input, k);
  const std::vector<Tensor> gs = geo.halo_slabs(g, k), xs = geo.halo_slabs(ns.input, k);
  const std::vector<Tensor> ys =
      relu_output.defined() ? geo.halo_slabs(relu_output, k) : std::vector<Tensor>();
  for (std::size_t i = 0; i < outs.size(); ++i) {
    Tensor out = outs[i];
    if (out.numel() == 0) continue;
    halo.grad_output = gs[i].contiguous();
    halo.x = xs[i].contiguous();
    if (relu_output.defined()) halo.relu_output = ys[i].contiguous();
    halo.layout = layout_over(l, halo.x);
    halo.grad_input = Tensor::empty(halo.x.shape(), dtype, g.device());
    run_kernel(kernels::kNormBackwardApply, device, dtype, halo);
    out.copy_(halo.grad_input);
  }
}

// A batch norm in eval mode, backward: with its running statistics constant
// the input's gradient is element-wise (halo cells alike: a halo cell's
// output gradient is this rank's part of it, and the map is linear), and
// the parameters' sums run over the whole range (the parts add up over the
// ranks). `gw`, `gb`: where wanted, its weight's and bias's gradients.
Tensor constant_norm_backward(const Layer& l, const NormState& ns, const Tensor& g,
                              const Tensor& weight, Tensor* gw, Tensor* gb) {
  kernels::NormBackwardApplyArgs args;
  args.grad_output = g;
  args.x = ns.input;
  args.layout = layout_over(l, ns.input);
  args.mean = ns.stats.mean;
  args.invstd = ns.stats.invstd;
  args.weight = weight;
  if (l.relu) args.relu_output = ns.output;
  args.grad_input = Tensor::empty(g.shape(), g.dtype(), g.device());
  if (gw) args.grad_weight = *gw = Tensor::empty({args.layout.params()}, g.dtype(), g.device());
  if (gb) args.grad_bias = *gb = Tensor::empty({args.layout.params()}, g.dtype(), g.device());
  run_kernel(kernels::kNormBackwardApply, g.device().type, g.dtype(), args);
  return args.grad_input;
}

}  // namespace

std::vector<DTensor> backward_handler(OpCall& call) {
  DTENSOR_CHECK_ARG(current_state() && !current_state()->window_inputs.empty(), kBackwardOp,
                    "runs only inside backward() of a recorded halo_chain");
  const ChainState& state = *current_state();
  const Chain& c = chain_of(call.schema(), true);
  const auto in = call.redistributed_inputs();
  const DTensor& gy = in[0];
  const DTensor& x = in[1];
  const auto kernels = local_conv_kernels(x.to_local().device(), x.dtype());
  WindowExchange engine(call, x.spec(), window_dims(c, x.ndim() - 2), kWindowStream);
  const Geometry geo = geometry_of(c, engine, x.shape());
  const Reductions reductions(x);

  // Per DTensor argument after grad_output and x: its gradient.
  std::vector<Tensor> grads(in.size());
  Tensor g = gy.to_local().contiguous();
  int k = static_cast<int>(c.num_windowed) - 1;
  std::size_t norm_index = state.norms.size();
  Tensor grad_x;
  // The forward's pieces of the batch: a norm's sums are posted piece by
  // piece, and a piece's are collected just before that piece's gradient
  // goes on (its convolution's backward-data), so the other piece's work
  // runs while they travel. Every rank posts in the same order.
  const std::vector<BatchPiece> pieces = batch_pieces(c, reductions, g.size(0));
  const std::int64_t batch = g.size(0);
  auto norm_piece = [&](const NormState& ns, const BatchPiece& p) {
    auto stat = [&](const Tensor& t) { return statistics_of(t, batch, p); };
    return NormState{samples_of(ns.input, p),
                     samples_of(ns.output, p),
                     {stat(ns.stats.mean), stat(ns.stats.invstd), stat(ns.stats.count)}};
  };
  // A norm whose sums are posted (piece by piece) and not yet collected.
  struct BegunNorm {
    std::size_t layer = 0;  // index in the chain
    Tensor grad_input;      // whole; each finished piece writes its samples
    std::vector<std::optional<NormBackward>> pieces;
  };
  auto begin_norm = [&](std::size_t layer, const Tensor& grad) {
    const NormState& ns = state.norms.at(norm_index - 1);
    BegunNorm b{layer, Tensor::empty(ns.input.shape(), grad.dtype(), grad.device()), {}};
    b.pieces.resize(pieces.size());
    return b;
  };
  auto begin_piece = [&](BegunNorm& b, const Tensor& grad, std::size_t q) {
    const Layer& l = c.layers[b.layer];
    b.pieces[q] = begin_norm_backward(call, reductions.of(l), l,
                                      norm_piece(state.norms.at(norm_index - 1), pieces[q]),
                                      samples_of(grad, pieces[q]), local_or_none(in, l.weight));
  };
  auto finish_piece = [&](BegunNorm& b, std::size_t q) {
    const Layer& l = c.layers[b.layer];
    Tensor gw, gb;
    finish_norm_backward(*b.pieces[q], geo, k, samples_of(b.grad_input, pieces[q]),
                         l.weight >= 0 ? &gw : nullptr, l.bias >= 0 ? &gb : nullptr);
    b.pieces[q].reset();
    auto add = [&](int index, const Tensor& t) {  // the pieces' parameter gradients
      if (index < 0) return;
      Tensor& sum = grads[static_cast<std::size_t>(index)];
      if (sum.defined())
        sum.add_(t);
      else
        sum = t;
    };
    add(l.weight, gw);
    add(l.bias, gb);
  };
  std::optional<BegunNorm> begun;
  // A begun norm finished whole, its input's gradient now g.
  auto finish_begun = [&] {
    if (!begun) return;
    for (std::size_t q = 0; q < pieces.size(); ++q)
      finish_piece(*begun, q);
    g = begun->grad_input;
    begun.reset();
  };
  for (std::size_t i = c.layers.size(); i-- > 0;) {
    const Layer& l = c.layers[i];
    const Tensor w = local_or_none(in, l.weight);
    if (l.activation) {
      finish_begun();  // the norm after it: finished first
      if (!geo.idle) g = activation(l, {g, state.activation_inputs.at(i)}, true);
      continue;
    }
    if (l.pool || l.upsample || l.conv_transpose) {
      // As a convolution's (below): the norm after it finished piece by
      // piece, the norm before it begun as each piece's gradient is there.
      std::optional<BegunNorm> finishing;
      finishing.swap(begun);
      const Tensor out_grad = finishing ? finishing->grad_input : g;
      const Tensor input = state.window_inputs.at(static_cast<std::size_t>(k)).assemble();
      const Tensor gi = Tensor::empty(input.shape(), g.dtype(), g.device());
      if (c.layers[i - 1].statistics()) begun = begin_norm(i - 1, gi);
      const auto taps = geo.idle || !l.pool ? std::vector<kernels::PoolTaps>()
                                            : pool_taps_of(l, geo, k, x.ndim() - 2);
      // (PyTorch's nearest backward indexes by its own rule.)
      const auto resample = geo.idle || !l.upsample ? std::vector<kernels::ResampleTaps>()
                                                    : resample_taps_of(l, geo, k, true);
      // A transposed convolution's output gradient over its full span
      // (zero beyond the range): its input's gradient is the convolution of
      // it, its weight's the convolution's weight gradient.
      const bool transposed = l.conv_transpose && !geo.idle;
      const TransposedSpan span = transposed ? transposed_span(l, geo, k) : TransposedSpan{};
      const Tensor grad_span =
          transposed
              ? Tensor::zeros(span_shape(g.size(0), out_grad.size(1), span), g.dtype(), g.device())
              : Tensor();
      for (std::size_t q = 0; q < pieces.size(); ++q) {
        if (finishing) finish_piece(*finishing, q);
        const BatchPiece& piece = pieces[q];
        if (geo.idle)
          samples_of(gi, piece).zero_();
        else if (l.pool)
          pool_backward(l, taps, samples_of(input, piece), samples_of(out_grad, piece),
                        samples_of(gi, piece));
        else if (l.upsample)
          run_kernel(kernels::kUpsampleBackward, g.device().type, g.dtype(),
                     {samples_of(out_grad, piece).contiguous(), resample, samples_of(gi, piece)});
        else {  // a transposed convolution
          const Tensor piece_span = samples_of(grad_span, piece);
          range_of_span(piece_span, span, geo, k).copy_(samples_of(out_grad, piece));
          samples_of(gi, piece).copy_(
              kernels->forward(piece_span, w, Tensor(), tconv::local_convolution(l.transposed)));
        }
        if (begun) begin_piece(*begun, gi, q);
      }
      if (l.conv_transpose) {  // this rank's part of the parameters' gradients
        Tensor& gw = grads[static_cast<std::size_t>(l.weight)];
        gw = transposed ? kernels
                              ->backward_weights(input, grad_span, w.shape(),
                                                 tconv::local_convolution(l.transposed), false)
                              .grad_weight
                        : Tensor::zeros(w.shape(), w.dtype(), w.device());
        if (l.bias >= 0) {
          Tensor sums = Tensor::zeros({out_grad.size(1)}, DType::F64);
          if (transposed)
            run_kernel(kernels::kChannelSums, g.device().type, g.dtype(),
                       {out_grad.contiguous(), sums});
          grads[static_cast<std::size_t>(l.bias)] = sums.to(g.dtype()).to(g.device());
        }
      }
      g = gi;
      --k;
      continue;
    }
    if (l.norm() && !l.statistics()) {  // running statistics: as an activation
      finish_begun();                   // the norm after it
      const NormState& ns = state.norms.at(--norm_index);
      Tensor gw, gb;
      if (!geo.idle) {
        g = constant_norm_backward(l, ns, g, w, l.weight >= 0 ? &gw : nullptr,
                                   l.bias >= 0 ? &gb : nullptr);
      } else {  // nothing computed here: zero parts of the sums
        if (l.weight >= 0) gw = Tensor::zeros(w.shape(), g.dtype(), g.device());
        if (l.bias >= 0)
          gb = Tensor::zeros(local_or_none(in, l.bias).shape(), g.dtype(), g.device());
      }
      if (l.weight >= 0) grads[static_cast<std::size_t>(l.weight)] = gw;
      if (l.bias >= 0) grads[static_cast<std::size_t>(l.bias)] = gb;
      continue;
    }
    if (!l.conv) {
      if (begun && begun->layer == i) {  // begun by the window layer after it
        --norm_index;
        continue;
      }
      finish_begun();  // a norm right after this one: finished first
      begun = begin_norm(i, g);
      for (std::size_t q = 0; q < pieces.size(); ++q)
        begin_piece(*begun, g, q);
      --norm_index;
      continue;
    }
    // This convolution's output gradient: a begun norm's, finished piece by
    // piece, each just before that piece's backward-data (the other piece's
    // work hides its sums' trip); else g. Its input gradient goes into the
    // window's strips that go back (the first convolution) or a tensor over
    // its input; a norm before it is begun on each piece as soon as the
    // piece's gradient is there.
    std::optional<BegunNorm> finishing;
    finishing.swap(begun);  // begun is empty until the norm before is begun
    const Tensor out_grad = finishing ? finishing->grad_input : g;
    const bool norm_before = i > 0 && c.layers[i - 1].statistics();
    const ConvParams p = geo.params(l, static_cast<std::size_t>(k));
    const TiledTensor& input = state.window_inputs.at(static_cast<std::size_t>(k));
    // A convolution that filled its padding ran on a padded copy: its
    // gradient is folded back onto the rows the padding came from.
    const bool fills = geo.fills(l, static_cast<std::size_t>(k));
    const ConvParams::Padding pads = geo.padding(static_cast<std::size_t>(k));
    std::optional<WindowExchange::Gradient> back;
    if (k == 0 && c.input_grad) back.emplace(engine.gradient(kGradientStream));
    Tensor gi;
    if (k > 0) {
      Shape held = input.shape();  // the previous layer's output
      for (std::size_t d = 0; fills && d < pads.size(); ++d)
        held[d + 2] -= pads[d].first + pads[d].second;
      gi = Tensor::empty(held, g.dtype(), g.device());
    }
    if (k > 0 && norm_before) begun = begin_norm(i - 1, gi);
    for (std::size_t q = 0; q < pieces.size(); ++q) {
      if (finishing) finish_piece(*finishing, q);
      if (k == 0 && !c.input_grad) continue;
      const BatchPiece& piece = pieces[q];
      const TiledTensor into = back ? back->window().narrow(0, piece.begin, piece.length)
                                    : TiledTensor::whole(samples_of(gi, piece));
      if (geo.idle) {  // nothing computed here: zero parts of the sums
        into.zero_();
      } else if (fills) {
        Shape shape = input.shape();
        shape[0] = piece.length;
        const Tensor grad_padded = Tensor::empty(shape, g.dtype(), g.device());
        kernels->backward_data(samples_of(out_grad, piece), w, TiledTensor::whole(grad_padded), p);
        detail::fold_padding(grad_padded, l.boundary, pads);
        into.scatter(detail::unpadded_view(grad_padded, pads));
      } else {
        if (geo.skips(static_cast<std::size_t>(k))) into.zero_();  // rows no output read
        kernels->backward_data(samples_of(out_grad, piece), w,
                               geo.used(into, static_cast<std::size_t>(k)), p);
      }
      if (begun) begin_piece(*begun, gi, q);
    }
    if (back) back->post();
    ConvWeightGrads wg;
    if (!geo.idle) {
      wg = kernels->backward_weights(out_grad, geo.used(input, static_cast<std::size_t>(k)),
                                     w.shape(), p, l.bias >= 0);
    } else {
      wg.grad_weight = Tensor::zeros(w.shape(), w.dtype(), w.device());
      wg.grad_bias = Tensor::zeros({w.size(0)}, w.dtype(), w.device());
    }
    if (back) grad_x = back->finish();
    if (k > 0) g = gi;
    grads[static_cast<std::size_t>(l.weight)] = wg.grad_weight;
    if (l.bias >= 0) grads[static_cast<std::size_t>(l.bias)] = wg.grad_bias;
    --k;
  }
  const auto& specs = call.sharding().output_specs;
  // Not wanted: zeros, so that the operator's outputs stay what its
  // strategies say (the node drops it).
  if (!c.input_grad)
    grad_x = Tensor::zeros(specs[0].local_shape(), x.dtype(), x.to_local().device());
  std::vector<DTensor> out{DTensor(grad_x, specs[0])};
  for (std::size_t i = 2; i < in.size(); ++i)  // running statistics have none: zeros
    out.emplace_back(grads[i].defined() ? grads[i]
                                        : Tensor::zeros(specs[i - 1].local_shape(), in[i].dtype(),
                                                        in[i].to_local().device()),
                     specs[i - 1]);
  return out;
}

}  // namespace dtensor::halo::chain
