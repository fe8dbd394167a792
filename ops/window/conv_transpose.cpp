// The transposed convolution: the handlers of "conv_transpose" and
// "conv_transpose_backward", on the window engine (dtensor/ops/window.h).
//
// The propagator picks a strategy (conv_transpose_strategies.h) and the
// inputs are redistributed to it; then each rank
//   forward:  exchanges the window of inputs that write into its outputs
//             (the transposed WindowDim) and runs the local transposed
//             convolution of each of its tiles (the shard, the strips
//             received), a convolution's backward-data with no padding; of
//             what each produces, it adds the part that falls into its own
//             outputs (the chunk rule on the OUTPUT extent);
//   backward: grad_input is a convolution of grad_output: each rank gathers
//             the window of grad_output its own inputs read (a sliding
//             WindowDim whose output is the input) and convolves it with the
//             window's local padding; nothing goes back. grad_weight is
//             backward-weights of that convolution on the same window (this
//             rank's partial sum) and grad_bias the sum of grad_output.
// Everything is computed from global shapes: no sizes are exchanged.
//
// The handlers communicate only through the engine (OpCall::group(),
// registered with HandlerOptions::defers_agreement).
#include <algorithm>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/channel.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/ops/window.h"
#include "dtensor/ops/window_ops.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/weighted_op.h"
#include "ops/window/conv_transpose_call.h"
#include "ops/window/conv_transpose_strategies.h"

namespace dtensor::tconv {
namespace {

// The stream of the window's exchange (one per call).
constexpr int kWindowStream = 0;

std::int64_t spatial_dims(const ConvTransposeParams& p) {
  return static_cast<std::int64_t>(p.stride.size());
}

// The bias goes to exactly one rank of every mesh dim whose output is a
// pending sum, so the sum counts it once.
bool owns_bias(const DTensorSpec& input) {
  const auto roles = roles_of(input.placements());
  const auto& coord = *input.mesh().get_coordinate();
  for (std::size_t m = 0; m < roles.size(); ++m)
    if (roles[m] == MeshDimRole::Partial && coord[m] != 0) return false;
  return true;
}

// y[:, c, ...] += b[c], by the backend's kernel.
void add_bias(const Tensor& y, const Tensor& bias) {
  if (!bias.defined() || y.numel() == 0) return;
  run_kernel(kernels::kChannelBias, y.device().type, y.dtype(), {y, bias.contiguous()});
}

// t [N, C, ...] summed over every dim but 1: [C], in t's dtype and device
// (summed by the backend's kernel, across blocks in f64).
Tensor channel_sums(const Tensor& t) {
  Tensor sums = Tensor::empty({t.size(1)}, DType::F64);
  run_kernel(kernels::kChannelSums, t.device().type, t.dtype(), {t.contiguous(), sums});
  return sums.to(t.dtype()).to(t.device());
}

// Whether every span of the engine holds inputs (and the rank has outputs).
bool window_live(const WindowExchange& engine) {
  if (!engine.has_output()) return false;
  for (const WindowSpan& s : engine.spans())
    if (s.length == 0 || s.output.length == 0) return false;
  return true;
}

std::vector<WindowDim> forward_dims(const Shape& weight_shape, const ConvTransposeParams& p) {
  std::vector<WindowDim> dims;
  for (std::size_t sd = 0; sd < p.stride.size(); ++sd)
    dims.push_back(WindowDim::transposed(weight_shape[sd + 2], p.stride[sd], p.dilation[sd],
                                         p.padding[sd], p.output_padding[sd]));
  return dims;
}

Tensor forward_handler(OpCall& call, const detail::WeightedOperands<ForwardCall>& in) {
  const ConvTransposeParams& p = in.call.params;
  const auto [x, w] = std::tie(in.tensors[0], in.tensors[1]);
  const std::int64_t out_channels = w.shape()[1] * p.groups;
  const auto& kernels = in.kernels;
  const Tensor local = x.to_local();
  WindowExchange engine(call, x.spec(), forward_dims(w.shape(), p), kWindowStream);
  WindowExchange::Pending pending = engine.post(local);
  // (The generic path checks it against the output spec.)
  const Shape local_out = engine.local_output_shape(local.size(0), out_channels);
  const TiledTensor& window = pending.wait();
  Tensor y;
  if (!window_live(engine) || window.tiles().empty()) {  // (an empty batch has no tiles)
    y = Tensor::zeros(local_out, x.dtype(), local.device());
  } else {
    // The transposed convolution is linear in its input, so the window's is
    // the sum of its tiles' (the shard and the strips received, read where
    // they lie): each tile's is a convolution's backward-data of that tile
    // alone, over global outputs from (origin + offset) * stride - padding;
    // of it, what falls into this rank's outputs is kept. The largest tile
    // (the shard) writes straight into y; the strips' (a few rows) are
    // added. No window is assembled.
    std::vector<const TiledTensor::Tile*> tiles;
    for (const auto& t : window.tiles())
      tiles.push_back(&t);
    std::stable_sort(tiles.begin(), tiles.end(), [](const auto* a, const auto* b) {
      return a->data.numel() > b->data.numel();
    });
    const Tensor wl = w.to_local();
    for (std::size_t k = 0; k < tiles.size(); ++k) {
      const TiledTensor::Tile& tile = *tiles[k];
      // The tile's outputs along each spatial dim and their overlap with
      // this rank's [o0, o1): where in the tile's result, where in y.
      Shape span{tile.data.size(0), out_channels}, src{0, 0}, dst{0, 0}, length{span[0], span[1]};
      bool covers_y = true;
      for (std::int64_t sd = 0; sd < spatial_dims(p); ++sd) {
        const auto u = static_cast<std::size_t>(sd);
        const WindowSpan& s = engine.spans()[u];
        const std::int64_t extent = p.dilation[u] * (w.shape()[u + 2] - 1) + 1;
        span.push_back((tile.data.size(sd + 2) - 1) * p.stride[u] + extent);
        const std::int64_t start = (s.origin + tile.offset[u + 2]) * p.stride[u] - p.padding[u];
        const std::int64_t lo = std::max(start, s.output.offset);
        const std::int64_t hi = std::min(start + span.back(), s.output.end());
        src.push_back(lo - start);
        dst.push_back(lo - s.output.offset);
        length.push_back(std::max<std::int64_t>(hi - lo, 0));
        covers_y = covers_y && lo == s.output.offset && hi == s.output.end();
      }
      if (k == 0)  // positions the shard's outputs do not reach start at zero
        y = covers_y ? Tensor::empty(local_out, x.dtype(), local.device())
                     : Tensor::zeros(local_out, x.dtype(), local.device());
      if (shape_numel(length) == 0) continue;
      // The tile's result as a destination: y's overlap, where it lies.
      Tensor overlap = y;
      for (std::int64_t sd = 0; sd < spatial_dims(p); ++sd) {
        const auto u = static_cast<std::size_t>(sd) + 2;
        overlap = overlap.narrow(sd + 2, dst[u], length[u]);
      }
      TiledTensor into(span, y.dtype(), y.device());
      into.add(overlap, src);
      if (k == 0)
        kernels->backward_data(tile.data, wl, into, local_convolution(p));  // written in place
      else
        into.add_(kernels->backward_data(tile.data, wl, span, local_convolution(p)));
    }
  }
  if (in.call.bias && owns_bias(x.spec())) add_bias(y, in.tensors[2].to_local());
  return y;
}

// The window of grad_output this rank's inputs [i0, i1) read: a sliding
// window over the output whose "output" is the input.
std::vector<WindowDim> backward_dims(const Shape& input_shape, const Shape& weight_shape,
                                     const ConvTransposeParams& p) {
  std::vector<WindowDim> dims;
  for (std::size_t sd = 0; sd < p.stride.size(); ++sd) {
    WindowDim d = WindowDim::sliding(weight_shape[sd + 2], p.stride[sd], p.dilation[sd],
                                     p.padding[sd], p.padding[sd] - p.output_padding[sd]);
    d.output_length = input_shape[sd + 2];
    dims.push_back(d);
  }
  return dims;
}

std::vector<Tensor> backward_handler(OpCall& call,
                                     const detail::WeightedOperands<BackwardCall>& in) {
  const ConvTransposeParams& p = in.call.params;
  const ConvOutputMask mask = in.call.mask;
  const auto [gy, x, w] = std::tie(in.tensors[0], in.tensors[1], in.tensors[2]);
  const auto& kernels = in.kernels;
  const Tensor local = x.to_local();
  const Tensor wl = w.to_local();
  std::vector<Tensor> locals;

  if (mask.input || mask.weight) {
    // Every rank has the same mask (the agreement check covers it), so all
    // skip the exchange alike when only grad_bias is asked for.
    WindowExchange engine(call, gy.spec(), backward_dims(x.shape(), w.shape(), p), kWindowStream);
    // The window as tiles, read where they lie (the kernels take tiles).
    WindowExchange::Pending pending = engine.post(gy.to_local());
    const TiledTensor& window = pending.wait();
    const bool live = window_live(engine);
    ConvParams lp = local_convolution(p);
    for (std::int64_t sd = 0; sd < spatial_dims(p); ++sd) {
      const auto u = static_cast<std::size_t>(sd);
      const WindowSpan& s = engine.spans()[u];
      DTENSOR_CHECK_ARG(
          s.output.length == local.size(sd + 2), kComponent,
          "internal: the engine computes {} inputs along spatial dim {}, the shard has {}",
          s.output.length, sd, local.size(sd + 2));
      if (s.output.length == 0) continue;
      const std::int64_t extent = p.dilation[u] * (w.shape()[u + 2] - 1) + 1;
      const std::int64_t first = s.output.offset * p.stride[u] - p.padding[u];
      const std::int64_t last = (s.output.end() - 1) * p.stride[u] - p.padding[u] + extent - 1;
      lp.padding[u] = {s.origin - first, last - (s.origin + s.length - 1)};
    }
    if (mask.input)
      locals.push_back(live ? kernels->forward(window, wl, Tensor(), lp)
                            : Tensor::zeros(local.shape(), x.dtype(), local.device()));
    if (mask.weight)
      locals.push_back(
          live ? kernels->backward_weights(local, window, wl.shape(), lp, false).grad_weight
               : Tensor::zeros(wl.shape(), x.dtype(), local.device()));
  }
  if (mask.bias) locals.push_back(channel_sums(gy.to_local()));
  return locals;
}

const detail::WeightedOpRegistration<ForwardCall, BackwardCall> kConvTranspose{
    {kNames, check_args, output_shape, forward_strategies, backward_strategies, forward_handler,
     backward_handler}};

}  // namespace
}  // namespace dtensor::tconv

namespace dtensor {

DTensor conv_transpose(const DTensor& input, const DTensor& weight,
                       const std::optional<DTensor>& bias, const ConvTransposeParams& params) {
  return detail::call_weighted_forward(tconv::kConvTranspose.op, input, weight, bias, params);
}

ConvGrads conv_transpose_backward(const DTensor& grad_output, const DTensor& input,
                                  const DTensor& weight, const ConvTransposeParams& params,
                                  const ConvOutputMask& mask) {
  return detail::call_weighted_backward(tconv::kConvTranspose.op, grad_output, input, weight,
                                        params, mask);
}

Shape conv_transpose_output_shape(const Shape& input, const Shape& weight,
                                  const ConvTransposeParams& params) {
  return tconv::output_shape(input, weight, params);
}

}  // namespace dtensor
