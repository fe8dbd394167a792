// The forward of a halo chain (halo_chain.h): one exchange brings the
// chain's combined halo, then every layer computes its range, the batch in
// pieces where the norms' statistics cross ranks (halo_chain.cpp says how).
#include <algorithm>
#include <optional>

#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/kernels/upsample.h"
#include "ops/window/halo_chain_geometry.h"
#include "ops/window/halo_chain_layer_ops.h"
#include "ops/window/halo_chain_run.h"
#include "ops/window/held_padding.h"

namespace dtensor::halo::chain {

std::vector<DTensor> forward_handler(OpCall& call) {
  const Chain& c = chain_of(call.schema(), false);
  const auto in = call.redistributed_inputs();
  const DTensor& x = in[0];
  const DeviceType device = x.to_local().device().type;
  const DType dtype = x.dtype();
  const auto kernels = local_conv_kernels(x.to_local().device(), dtype);
  ChainState scratch;
  ChainState& state = current_state() ? *current_state() : scratch;
  state.window_inputs.clear();
  state.norms.clear();
  state.activation_inputs.assign(c.layers.size(), Tensor());

  WindowExchange engine(call, x.spec(), window_dims(c, x.ndim() - 2), kWindowStream);
  WindowExchange::Pending pending = engine.post(x.to_local());
  const Geometry g = geometry_of(c, engine, x.shape());
  const std::int64_t batch = x.to_local().size(0);
  // With a halo along one dim only, the first convolution's outputs that
  // read none of it run while it travels (the first piece's, below); not
  // when it fills its padding from the window.
  // (Not in a chain that resamples: the interior is planned for stride 1.)
  const std::optional<std::size_t> early =
      g.idle || c.resamples || g.fills(c.layers.front(), 0) ? std::nullopt : only_halo_dim(g);
  TiledTensor window = early ? pending.window() : pending.wait();
  if (g.idle)  // nothing to compute here; the norms' collectives still run
    window = TiledTensor::whole(
        Tensor::zeros(range_shape({batch, x.shape()[1]}, g, -1), dtype, x.to_local().device()));
  bool window_ready = !early;
  const Reductions reductions(x);

  // Every layer's output over its range, for the whole batch: the pieces
  // write their samples into it, the backward and the next layer read it.
  const std::size_t num_layers = c.layers.size();
  std::vector<Tensor> out(num_layers);
  std::vector<int> window_of(num_layers);  // the last window layer at or before each layer
  for (std::size_t i = 0, k = 0; i < num_layers; ++i)
    window_of[i] = static_cast<int>(c.layers[i].windowed() ? k++ : k - 1);
  // A pool's taps per spatial dim: what each output of its range reads of
  // its input's range, by global position (so the edges are the unfused
  // pool's: pool_taps.h).
  std::vector<std::vector<kernels::PoolTaps>> taps(num_layers);
  // An upsample's likewise.
  std::vector<std::vector<kernels::ResampleTaps>> upsample_taps(num_layers);
  for (std::size_t i = 0; i < num_layers && !g.idle; ++i) {
    if (c.layers[i].pool) taps[i] = pool_taps_of(c.layers[i], g, window_of[i], x.ndim() - 2);
    if (c.layers[i].upsample)
      upsample_taps[i] = resample_taps_of(c.layers[i], g, window_of[i], false);
  }
  std::vector<Tensor> moments(num_layers);  // a norm's [statistics, 3], merged in place
  // A layer's output: an idle rank computes none of them, so zeros, not
  // leftover values, reach the norms' collectives and sums.
  auto fresh = [&](const Shape& shape) {
    return g.idle ? Tensor::zeros(shape, dtype, x.to_local().device())
                  : Tensor::empty(shape, dtype, x.to_local().device());
  };
  // A convolution that fills its padding: its input, padded (g.fills).
  std::vector<Tensor> padded(num_layers);
  auto input_of = [&](std::size_t i, const BatchPiece& p) {
    return i == 0 ? window.narrow(0, p.begin, p.length)
                  : TiledTensor::whole(samples_of(out[i - 1], p));
  };

  // A piece's norm whose statistics are on their way: finished (merged and
  // applied to the piece's samples) when the piece next runs, or at the end.
  struct PendingNorm {
    std::size_t layer = 0;
    std::optional<norm::PendingMerge> merge;
  };
  const std::vector<BatchPiece> pieces = batch_pieces(c, reductions, batch);
  std::vector<PendingNorm> posted(pieces.size());
  // Norm layer i on the piece's samples, with `stats`.
  auto apply_norm = [&](std::size_t i, const BatchPiece& p, const norm::Stats& stats) {
    const Layer& l = c.layers[i];
    kernels::NormApplyArgs apply;
    apply.x = samples_of(out[i - 1], p);
    apply.layout = layout_over(l, apply.x);
    apply.mean = stats.mean;
    apply.invstd = stats.invstd;
    apply.weight = local_or_none(in, l.weight);
    apply.bias = local_or_none(in, l.bias);
    apply.relu = l.relu;
    apply.y = samples_of(out[i], p);
    run_kernel(kernels::kNormApply, device, dtype, apply);
  };
  auto finish_norm = [&](std::size_t piece) {
    PendingNorm& pn = posted[piece];
    if (!pn.merge) return;
    const Tensor merged = pn.merge->finish();
    pn.merge.reset();
    apply_norm(pn.layer, pieces[piece],
               norm::stats_from_moments(merged, 3, c.layers[pn.layer].eps));
  };
  // A batch norm in eval mode: its running statistics.
  std::vector<norm::Stats> running(num_layers);
  for (std::size_t i = 0; i < num_layers; ++i)
    if (c.layers[i].norm() && !c.layers[i].statistics())
      running[i] =
          norm::stats_from_running(local_or_none(in, c.layers[i].running_mean),
                                   local_or_none(in, c.layers[i].running_var), c.layers[i].eps);

  // The layers in runs that end at a norm: each piece runs the whole run,
  // then posts its statistics; it finishes them at the start of the next
  // run, after the other pieces have run theirs.
  for (std::size_t first = 0; first < num_layers;) {
    std::size_t last = first;
    while (last + 1 < num_layers && !c.layers[last].statistics())
      ++last;
    for (std::size_t i = first; i <= last; ++i) {  // the run's outputs, whole
      const Layer& l = c.layers[i];
      const int k = window_of[i];
      if (l.conv) {
        if (g.fills(l, static_cast<std::size_t>(k)))
          padded[i] = Tensor::empty(padded_shape(i == 0 ? window.shape() : out[i - 1].shape(),
                                                 g.padding(static_cast<std::size_t>(k))),
                                    dtype, x.to_local().device());
        if (state.save)
          state.window_inputs.push_back(padded[i].defined() ? TiledTensor::whole(padded[i])
                                        : i == 0            ? window
                                                            : TiledTensor::whole(out[i - 1]));
        out[i] = fresh(range_shape({batch, l.channels}, g, k));
      } else if (l.pool || l.upsample || l.conv_transpose) {
        if (state.save) state.window_inputs.push_back(TiledTensor::whole(out[i - 1]));
        out[i] = fresh(range_shape({batch, l.channels}, g, k));
      } else if (l.activation) {
        out[i] = fresh(out[i - 1].shape());
        if (state.save) state.activation_inputs[i] = out[i - 1];
      } else {
        out[i] = fresh(out[i - 1].shape());
        if (l.statistics())
          moments[i] = Tensor::empty({layout_over(l, out[i - 1]).stats(), 3}, DType::F64);
      }
    }
    for (std::size_t piece = 0; piece < pieces.size(); ++piece) {
      const BatchPiece& p = pieces[piece];
      finish_norm(piece);
      for (std::size_t i = first; i <= last; ++i) {
        const Layer& l = c.layers[i];
        const int k = window_of[i];
        if (l.conv) {
          if (g.idle) continue;
          const Tensor& w = in[static_cast<std::size_t>(l.weight)].to_local();
          const Tensor bias = local_or_none(in, l.bias);
          const ConvParams params = g.params(l, static_cast<std::size_t>(k));
          const Tensor y = samples_of(out[i], p);
          if (padded[i].defined()) {  // the input, padded as its mode says
            const Tensor piece = samples_of(padded[i], p);
            const ConvParams::Padding pads = g.padding(static_cast<std::size_t>(k));
            input_of(i, p).copy_to(detail::unpadded_view(piece, pads));
            detail::fill_padding(piece, l.boundary, pads);
            kernels->forward_into(TiledTensor::whole(piece), w, bias, params, y);
            continue;
          }
          if (window_ready) {
            kernels->forward_into(g.used(input_of(i, p), static_cast<std::size_t>(k)), w, bias,
                                  params, y);
            continue;
          }
          // The outputs along the halo's dim that read only the rank's own
          // input (plan: chain_interior), then the halo, then the rest.
          const std::size_t d = *early;
          const auto dim = static_cast<std::int64_t>(d) + 2;
          const detail::ChainStep& step = g.dims[d].steps[0];
          const std::int64_t extent = l.dims[d].extent;
          auto rows = [&](std::int64_t a, std::int64_t b) {
            if (b <= a) return;
            const detail::ChainSubStep sub = detail::chain_sub_step(step, extent, a, b);
            ConvParams part = params;
            part.padding[d] = {sub.pad_left, sub.pad_right};
            kernels->forward_into(input_of(i, p).narrow(dim, sub.in_a, sub.in_b - sub.in_a), w,
                                  bias, part, y.narrow(dim, a, b - a));
          };
          const auto [a, b] =
              detail::chain_interior(step, extent, g.dims[d].owned_begin, g.dims[d].owned_end);
          rows(a, b);
          pending.wait();
          window_ready = true;
          rows(0, a);
          rows(b, step.out_end - step.out_begin);
          continue;
        }
        if (l.pool) {
          if (!g.idle) pool_forward(l, taps[i], samples_of(out[i - 1], p), samples_of(out[i], p));
          continue;
        }
        if (l.upsample) {
          if (!g.idle)
            run_kernel(kernels::kUpsampleForward, device, dtype,
                       {samples_of(out[i - 1], p), upsample_taps[i], samples_of(out[i], p)});
          continue;
        }
        if (l.conv_transpose) {
          if (!g.idle)
            conv_transpose_forward(l, transposed_span(l, g, k), *kernels,
                                   in[static_cast<std::size_t>(l.weight)].to_local(),
                                   local_or_none(in, l.bias), samples_of(out[i - 1], p),
                                   samples_of(out[i], p), g, k);
          continue;
        }
        if (l.activation) {  // element-wise: halo cells as owned ones
          if (!g.idle)
            samples_of(out[i], p).copy_(activation(l, {samples_of(out[i - 1], p)}, false));
          continue;
        }
        if (!l.statistics()) {  // running statistics: element-wise too
          if (!g.idle) apply_norm(i, p, running[i]);
          continue;
        }
        // Statistics from the cells this rank owns only (read in place).
        const Tensor owned = g.owned(samples_of(out[i - 1], p), k);
        Tensor mine = statistics_of(moments[i], batch, p);
        run_kernel(kernels::kNormMoments, device, dtype, {owned, layout_over(l, owned), mine});
        posted[piece] = {i, norm::PendingMerge(call, reductions.of(l), mine,
                                               norm::PendingMerge::Records::Moments, kStatsStream)};
      }
    }
    first = last + 1;
  }
  for (std::size_t piece = 0; piece < pieces.size(); ++piece)
    finish_norm(piece);
  if (!window_ready) pending.wait();  // no piece ran the first convolution
  if (state.save)
    for (std::size_t i = 0; i < num_layers; ++i)
      if (c.layers[i].norm())
        state.norms.push_back({out[i - 1], out[i],
                               c.layers[i].statistics()
                                   ? norm::stats_from_moments(moments[i], 3, c.layers[i].eps)
                                   : running[i]});
  const Tensor& dense = out.back();
  const auto& specs = call.sharding().output_specs;
  DTENSOR_CHECK_ARG(dense.shape() == specs[0].local_shape(), kForwardOp,
                    "internal: local output {} but the output spec {} needs {}",
                    shape_str(dense.shape()), specs[0].str(), shape_str(specs[0].local_shape()));
  std::vector<DTensor> result{DTensor(dense, specs[0])};
  // The batch norms' running statistics, from the merged moments.
  for (std::size_t i = 0; i < num_layers; ++i) {
    const Layer& l = c.layers[i];
    if (l.running_output < 0) continue;
    const norm::RunningStats r =
        norm::updated_running_stats(local_or_none(in, l.running_mean),
                                    local_or_none(in, l.running_var), moments[i], 3, l.momentum);
    result.push_back(norm::wrap_small(r.mean, specs[static_cast<std::size_t>(l.running_output)]));
    result.push_back(
        norm::wrap_small(r.var, specs[static_cast<std::size_t>(l.running_output) + 1]));
  }
  return result;
}

}  // namespace dtensor::halo::chain
