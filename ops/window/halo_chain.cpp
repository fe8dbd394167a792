// A chain of convolutions, group and batch norms, activations, pools,
// upsamples and transposed convolutions with one halo exchange
// (dtensor/ops/halo_chain.h): the operators "halo_chain" and
// "halo_chain_backward", their handlers, the autograd node that joins them,
// and the cost model.
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
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/autocast.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/channel.h"
#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/kernels/upsample.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/window.h"
#include "ops/norm/norm_stats.h"
#include "ops/norm/stat_reduction.h"
#include "ops/window/conv_transpose_call.h"
#include "ops/window/halo_chain_call.h"
#include "ops/window/halo_chain_plan.h"
#include "ops/window/held_padding.h"
#include "ops/window/pool_taps.h"
#include "ops/window/resample_taps.h"
#include "ops/window/upsample_geometry.h"

namespace dtensor {
namespace {

using halo::kBackwardOp;
using halo::kForwardOp;
constexpr int kWindowStream = 0, kGradientStream = 1, kStatsStream = 2;

// ---- the call's arguments -------------------------------------------------

// A layer as the operators read it: its parameters, and its DTensors'
// indices among the call's DTensor arguments (-1: none).
struct Layer {
  bool conv = false;
  bool pool = false;
  bool upsample = false;
  bool conv_transpose = false;
  bool activation = false;  // none of these: a norm
  bool batch = false;       // a norm: batch_norm, else group_norm
  std::string op{};         // an activation's operator
  double negative_slope = 0;
  GeluApproximate approximate = GeluApproximate::None;
  bool norm() const { return !conv && !pool && !upsample && !conv_transpose && !activation; }
  // A norm whose statistics are the input's (they cross ranks): a group
  // norm, or a batch norm in training. A batch norm in eval mode normalises
  // with its running statistics: element-wise, as an activation.
  bool statistics() const { return norm() && (!batch || training); }
  norm::NormKind kind() const { return batch ? norm::NormKind::Batch : norm::NormKind::Group; }
  // The layers the plan widens the range for (halo_chain_plan.h's steps).
  bool windowed() const { return conv || pool || upsample || conv_transpose; }
  ConvParams params{};   // expanded to the spatial rank; padding explicit
  bool average = false;  // a pool: avg_pool, else max_pool
  PoolParams pool_params{};
  kernels::AvgDivisor divisor{};               // an avg_pool's
  std::vector<WindowDim> resample{};           // an upsample's, per spatial dim
  ConvTransposeParams transposed{};            // a transposed convolution's (expanded)
  std::vector<detail::ChainWindowDim> dims{};  // a window layer's
  Boundary boundary = Boundary::Zeros;         // a convolution's padding mode
  std::int64_t channels = 0;                   // its output's
  std::int64_t num_groups = 1;
  double eps = 0;
  bool relu = false;
  int weight = -1, bias = -1;
  bool training = true;  // a batch norm's
  double momentum = 0;
  int running_mean = -1, running_var = -1;
  // A batch norm that updates its running statistics: the forward's output
  // holding the updated mean (the variance is the next).
  int running_output = -1;
};

// The call as the handlers read it, made once per call from its typed form
// (halo_chain_call.h) and cached on the schema.
struct Chain {
  std::vector<Layer> layers;
  std::size_t num_windowed = 0;  // convolutions, pools, upsamples and transposed convolutions
  int num_running = 0;           // batch norms that update running statistics
  bool resamples = false;        // a window layer changes the length (halo_chain_plan.h)
  Shape output_shape;            // the chain's output's (global)
  // Index of the input among the DTensor arguments (1 in the backward).
  int input = 0;
  // The backward only: whether the input's gradient is wanted (when not,
  // the first convolution's backward-data and the exchange are skipped).
  bool input_grad = true;
};

// A convolution (parameters expanded to the weight's spatial dims) along
// spatial dim `d`, as the plan reads it.
detail::ChainWindowDim conv_dim(const ConvParams& p, const Shape& weight, std::size_t d) {
  return {p.dilation[d] * (weight[d + 2] - 1) + 1, p.padding[d].first, boundary_of(p.padding_mode),
          p.stride[d], p.padding[d].second};
}

// A pool (parameters expanded) along spatial dim `d`: to the plan, a
// convolution whose padding is its own (never filled from held rows).
detail::ChainWindowDim pool_dim(const PoolParams& p, std::size_t d) {
  return {p.dilation[d] * (p.kernel[d] - 1) + 1, p.padding[d].first, Boundary::Zeros, p.stride[d],
          p.padding[d].second};
}

// An upsample by the whole factor output / length along a dim, as the plan
// reads it: a transposed window whose footprint holds every output's taps
// (nearest: input floor(o / f); linear without align_corners: from
// (o + 1/2) / f - 1/2, so floor(o / f) and a neighbour on either side).
// (Where the output is no whole multiple, halo_chain_refusal refuses.)
detail::ChainWindowDim upsample_dim(std::int64_t length, std::int64_t output, bool linear) {
  const std::int64_t f = std::max<std::int64_t>(1, length > 0 ? output / length : 1);
  detail::ChainWindowDim d{linear ? 3 * f : f, linear ? f : 0, Boundary::Zeros, f};
  d.right = d.pad_left;
  d.transposed = true;
  return d;
}

// A transposed convolution (parameters expanded) along spatial dim `d`: a
// transposed window whose right padding carries output_padding's part, as
// WindowDim::transposed's.
detail::ChainWindowDim conv_transpose_dim(const ConvTransposeParams& p, const Shape& weight,
                                          std::size_t d) {
  detail::ChainWindowDim dim{p.dilation[d] * (weight[d + 2] - 1) + 1, p.padding[d], Boundary::Zeros,
                             p.stride[d]};
  dim.right = p.padding[d] - p.output_padding[d];
  dim.transposed = true;
  return dim;
}

// Whether a window layer changes the length it passes on (a stride, or
// padding that is not "same", or an upsample): the chain then resamples.
bool resamples(const detail::ChainWindowDim& d) {
  return d.transposed || d.stride != 1 || d.pad_right() != d.extent - 1 - d.pad_left;
}

Chain chain_of(const DTensor& x, const std::vector<ChainLayer>& layers, int input,
               bool input_grad) {
  Chain chain;
  chain.input = input;
  chain.input_grad = input_grad;
  int next_dtensor = input + 1;
  auto index_of = [&](const std::optional<DTensor>& t) { return t ? next_dtensor++ : -1; };
  const std::int64_t spatial = x.ndim() - 2;
  Shape shape = x.shape();  // each layer's input's (global), in turn
  for (const ChainLayer& layer : layers) {
    Layer l;
    auto add_dim = [&](const detail::ChainWindowDim& dim) {
      const std::size_t d = l.dims.size();
      shape[d + 2] = dim.output_length(shape[d + 2]);
      l.dims.push_back(dim);
      chain.resamples = chain.resamples || resamples(dim);
    };
    if (const auto* c = std::get_if<ChainConv>(&layer)) {
      const Shape& w = c->weight.shape();
      DTENSOR_CHECK_ARG(static_cast<std::int64_t>(w.size()) == spatial + 2, kForwardOp,
                        "a convolution's weight {} does not fit {} spatial dims", shape_str(w),
                        spatial);
      l.conv = true;
      l.weight = next_dtensor++;
      l.bias = index_of(c->bias);
      l.params = c->params;
      l.boundary = boundary_of(c->params.padding_mode);
      for (std::int64_t d = 0; d < spatial; ++d)
        add_dim(conv_dim(l.params, w, static_cast<std::size_t>(d)));
      shape[1] = w[0];
      ++chain.num_windowed;
    } else if (const auto* t = std::get_if<ChainConvTranspose>(&layer)) {
      const Shape& w = t->weight.shape();
      DTENSOR_CHECK_ARG(static_cast<std::int64_t>(w.size()) == spatial + 2, kForwardOp,
                        "a transposed convolution's weight {} does not fit {} spatial dims",
                        shape_str(w), spatial);
      l.conv_transpose = true;
      l.weight = next_dtensor++;
      l.bias = index_of(t->bias);
      l.transposed = t->params.expanded(spatial);
      for (std::int64_t d = 0; d < spatial; ++d)
        add_dim(conv_transpose_dim(l.transposed, w, static_cast<std::size_t>(d)));
      shape[1] = w[1] * l.transposed.groups;
      ++chain.num_windowed;
    } else if (const auto* u = std::get_if<ChainUpsample>(&layer)) {
      l.upsample = true;
      const bool linear = u->params.mode == UpsampleMode::Linear;
      const window::ExpandedUpsample e = window::expand_upsample(shape, u->params);
      for (std::size_t d = 0; d < static_cast<std::size_t>(spatial); ++d) {
        l.resample.push_back(window::resample_dim(e, d, linear, u->params.align_corners));
        add_dim(upsample_dim(shape[d + 2], e.output_size[d], linear));
      }
      ++chain.num_windowed;
    } else if (const auto* pool = std::get_if<ChainPool>(&layer)) {
      DTENSOR_CHECK_ARG(static_cast<std::int64_t>(pool->params.kernel.size()) == spatial,
                        kForwardOp, "a pool's kernel has {} entries for {} spatial dims",
                        pool->params.kernel.size(), spatial);
      l.pool = true;
      l.average = pool->average;
      l.pool_params = pool->params.expanded(spatial);
      l.divisor = {l.pool_params.count_include_pad, l.pool_params.divisor_override};
      for (std::int64_t d = 0; d < spatial; ++d)
        add_dim(pool_dim(l.pool_params, static_cast<std::size_t>(d)));
      ++chain.num_windowed;
    } else if (const auto* a = std::get_if<ChainActivation>(&layer)) {
      l.activation = true;
      l.op = a->op;
      l.negative_slope = a->negative_slope;
      l.approximate = a->approximate;
    } else if (const auto* b = std::get_if<ChainBatchNorm>(&layer)) {
      l.batch = true;
      l.eps = b->eps;
      l.weight = index_of(b->weight);
      l.bias = index_of(b->bias);
      l.running_mean = index_of(b->running_mean);
      l.running_var = index_of(b->running_var);
      l.training = b->training;
      l.momentum = b->momentum;
      l.relu = b->relu;
      if (b->updates_running_stats()) {
        l.running_output = 1 + 2 * chain.num_running;
        ++chain.num_running;
      }
    } else {
      const auto& n = std::get<ChainGroupNorm>(layer);
      l.num_groups = n.num_groups;
      l.eps = n.eps;
      l.weight = index_of(n.weight);
      l.bias = index_of(n.bias);
      l.relu = n.relu;
    }
    l.channels = shape[1];
    chain.layers.push_back(std::move(l));
  }
  chain.output_shape = shape;
  return chain;
}

const Chain& chain_of(const OpSchema& s, bool backward) {
  return decoded<Chain>(s, [&] {
    if (backward) {
      const auto& c = decoded<halo::ChainBackwardCall>(s);
      return chain_of(c.input, c.layers, 1, c.input_grad);
    }
    const auto& c = decoded<halo::ChainCall>(s);
    return chain_of(c.input, c.layers, 0, true);
  });
}

// ---- what can be fused ----------------------------------------------------

bool replicated(const DTensor& t) {
  return std::all_of(t.placements().begin(), t.placements().end(),
                     [](const Placement& p) { return p.is_replicate(); });
}

bool known_activation(const std::string& op) {
  for (const char* known : {"relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh"})
    if (op == known) return true;
  return false;
}

// The smallest non-empty shard of the input's dim `dim` on any rank (the
// dim's length where it is not sharded): what an edge rank holds at least.
std::int64_t smallest_shard(const DTensor& x, std::int64_t dim) {
  const auto& mesh_shape = x.mesh().shape();
  std::vector<std::int64_t> coordinate(mesh_shape.size(), 0);
  std::int64_t smallest = x.shape()[static_cast<std::size_t>(dim)];
  for (;;) {
    const std::int64_t n = x.spec().local_shape_at(coordinate)[static_cast<std::size_t>(dim)];
    if (n > 0) smallest = std::min(smallest, n);
    std::size_t m = 0;
    for (; m < coordinate.size(); ++m) {
      if (++coordinate[m] < mesh_shape[m]) break;
      coordinate[m] = 0;
    }
    if (m == coordinate.size()) return smallest;
  }
}

// The rules on the input alone (halo_chain_input_refusal).
std::optional<std::string> input_refusal(const DTensor& x) {
  if (x.ndim() < 3) return "the input is not [N, C, spatial...]";
  // Under autocast each layer picks its own precision; the chain would not.
  // f64 is never lowered (nor are its parameters, of the same dtype).
  if (autocast_enabled() && x.dtype() != DType::F64) return "autocast is on";
  // Validated on CPU only: elsewhere the layers run one by one.
  if (x.mesh().device().type != DeviceType::CPU) return "the input is not on the CPU";
  bool sharded_spatial = false;
  for (std::size_t m = 0; m < x.placements().size(); ++m) {
    const Placement& p = x.placements()[m];
    if (p.is_partial()) return "the input is a pending sum";
    if (p.is_shard(1)) return "the input's channels are sharded";
    if (p.is_shard() && p.dim() >= 2 && x.mesh().size(static_cast<std::int64_t>(m)) > 1)
      sharded_spatial = true;
  }
  if (!sharded_spatial) return "no spatial dim of the input is sharded: there is no halo";
  return std::nullopt;
}

// An upsample's rules (ChainUpsample): on success its dims join
// `window_layers` and `lengths` become its output's.
std::optional<std::string> upsample_refusal(
    const ChainUpsample& u, std::int64_t channels, Shape& lengths,
    std::vector<std::vector<detail::ChainWindowDim>>& window_layers) {
  const bool linear = u.params.mode == UpsampleMode::Linear;
  if (linear && u.params.align_corners) return "an upsample aligns corners";
  Shape shape{1, channels};
  shape.insert(shape.end(), lengths.begin(), lengths.end());
  window::ExpandedUpsample e;
  try {
    e = window::expand_upsample(shape, u.params);
  } catch (const InvalidArgument&) {
    return "an upsample's size or scale_factor does not fit its input (run alone, it says why)";
  }
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    const std::int64_t length = lengths[d], output = e.output_size[d];
    if (output % length != 0) return "an upsample's output is no whole multiple of its input";
    const detail::ChainWindowDim dim = upsample_dim(length, output, linear);
    // Every output's taps (the forward's and the backward's index rules)
    // inside its footprint: a scale factor that is not output / input
    // (2.0000001, say) indexes otherwise.
    const WindowDim resample = window::resample_dim(e, d, linear, false);
    for (std::int64_t o = 0; o < output; ++o) {
      const auto [lo, hi] = dim.reads(o, o + 1);
      for (const bool backward : {false, true}) {
        const WindowDim::ResampleTap t = resample.resample_source(length, o, backward);
        if (std::min(t.i0, t.i1) < std::max<std::int64_t>(lo, 0) ||
            std::max(t.i0, t.i1) >= std::min(hi, length))
          return "an upsample's scale factor indexes its input as no whole factor does";
      }
    }
    lengths[d] = output;
    window_layers[d].push_back(dim);
  }
  return std::nullopt;
}

// What the refusal's rules on the layers found, for its rules on the plan.
struct ChainGeometry {
  // Per spatial dim, the window layers (convolutions and pools) in order.
  std::vector<std::vector<detail::ChainWindowDim>> window_layers;
  // Per norm whose statistics are the batch's: the window layers before it.
  std::vector<std::size_t> statistics_at;
};

// The refusal's rules on the input and each layer, and on the layers
// together; the plan's are plan_refusal's.
std::optional<std::string> layer_refusal(const DTensor& x, const std::vector<ChainLayer>& layers,
                                         ChainGeometry& geometry) {
  if (auto why = input_refusal(x)) return why;
  if (layers.empty() || !std::holds_alternative<ChainConv>(layers.front()))
    return "the chain does not start with a convolution";
  const std::int64_t spatial = x.ndim() - 2;
  std::int64_t channels = x.shape()[1];
  std::size_t windowed = 0;
  auto& window_layers = geometry.window_layers;
  window_layers.assign(static_cast<std::size_t>(spatial), {});
  Shape lengths(x.shape().begin() + 2, x.shape().end());  // each layer's input's, in turn
  auto& statistics_at = geometry.statistics_at;
  statistics_at.clear();
  auto parameter_ok = [&](const std::optional<DTensor>& t, const Shape& shape) {
    return !t || (t->mesh() == x.mesh() && replicated(*t) && t->dtype() == x.dtype() &&
                  t->shape() == shape);
  };
  for (const auto& layer : layers) {
    if (const auto* c = std::get_if<ChainConv>(&layer)) {
      const Shape& w = c->weight.shape();
      if (!parameter_ok(c->weight, w) || static_cast<std::int64_t>(w.size()) != x.ndim())
        return "a convolution's weight is not a replicated [out, in / groups, k...] tensor";
      const ConvParams p = c->params.expanded(spatial);
      if (p.groups < 1 || w[0] % p.groups != 0 || w[1] * p.groups != channels)
        return "a convolution's weight does not fit its input's channels";
      if (!parameter_ok(c->bias, {w[0]})) return "a convolution's bias is not [out], replicated";
      for (std::int64_t d = 0; d < spatial; ++d) {
        const auto i = static_cast<std::size_t>(d);
        const detail::ChainWindowDim dim = conv_dim(p, w, i);
        if (p.stride[i] < 1 || p.padding[i].first < 0 || p.padding[i].second < 0 ||
            p.dilation[i] < 1)
          return "a convolution's stride, padding or dilation is not valid";
        // An output that reads padding only has no place in the plan.
        if (p.padding[i].first >= dim.extent || p.padding[i].second >= dim.extent)
          return "a convolution pads as wide as its window or wider";
        if (dim.output_length(lengths[i]) < 1) return "a window layer's output is empty";
        lengths[i] = dim.output_length(lengths[i]);
        window_layers[i].push_back(dim);
      }
      channels = w[0];
      ++windowed;
    } else if (const auto* pool = std::get_if<ChainPool>(&layer)) {
      const PoolParams p = pool->params.expanded(spatial);
      for (std::int64_t d = 0; d < spatial; ++d) {
        const auto i = static_cast<std::size_t>(d);
        const auto [left, right] = p.padding[i];
        // PyTorch's rules (pool_ops.cpp checks them on the layer alone).
        if (p.kernel[i] < 1 || p.dilation[i] < 1 || (pool->average && p.dilation[i] != 1) ||
            left < 0 || right < 0 || left > p.kernel[i] / 2 || right > p.kernel[i] / 2 ||
            (p.divisor_override && *p.divisor_override == 0))
          return "a pool's parameters are not valid (kernel and dilation >= 1, avg_pool "
                 "undilated, padding within half the kernel, divisor_override not zero)";
        const detail::ChainWindowDim dim = pool_dim(p, i);
        if (p.stride[i] < 1) return "a pool's stride is not valid";
        // ceil_mode changes nothing at stride 1; else the chain would
        // need its last window clipped as the pool clips it.
        if (p.ceil_mode && p.stride[i] > 1) return "a strided pool has ceil_mode";
        if (dim.output_length(lengths[i]) < 1) return "a window layer's output is empty";
        lengths[i] = dim.output_length(lengths[i]);
        window_layers[i].push_back(dim);
      }
      ++windowed;
    } else if (const auto* u = std::get_if<ChainUpsample>(&layer)) {
      if (auto why = upsample_refusal(*u, channels, lengths, window_layers)) return why;
      ++windowed;
    } else if (const auto* t = std::get_if<ChainConvTranspose>(&layer)) {
      const Shape& w = t->weight.shape();
      if (!parameter_ok(t->weight, w) || static_cast<std::int64_t>(w.size()) != x.ndim())
        return "a transposed convolution's weight is not a replicated [in, out / groups, k...] "
               "tensor";
      Shape input{x.shape()[0], channels};
      input.insert(input.end(), lengths.begin(), lengths.end());
      ConvTransposeParams p;
      try {
        p = tconv::check_args(input, w, t->bias ? std::optional(t->bias->shape()) : std::nullopt,
                              t->params);
      } catch (const InvalidArgument&) {
        return "a transposed convolution does not fit its input (run alone, it says why)";
      }
      if (!parameter_ok(t->bias, {w[1] * p.groups}))
        return "a transposed convolution's bias is not [out], replicated";
      // (Windows narrower than their stride, and output_padding beyond the
      // padding, are the plan's to refuse: chain_boundary_refusal.)
      for (std::int64_t d = 0; d < spatial; ++d) {
        const auto i = static_cast<std::size_t>(d);
        const detail::ChainWindowDim dim = conv_transpose_dim(p, w, i);
        lengths[i] = dim.output_length(lengths[i]);
        window_layers[i].push_back(dim);
      }
      channels = w[1] * p.groups;
      ++windowed;
    } else if (const auto* a = std::get_if<ChainActivation>(&layer)) {
      if (!known_activation(a->op))
        return "an activation is not relu, leaky_relu, gelu, silu, sigmoid or tanh";
      if (!std::isfinite(a->negative_slope)) return "a leaky_relu's negative_slope is not finite";
    } else if (const auto* b = std::get_if<ChainBatchNorm>(&layer)) {
      if (!(b->eps >= 0) || !std::isfinite(b->momentum))
        return "a batch norm's eps is negative or its momentum not finite";
      if (b->running_mean.has_value() != b->running_var.has_value())
        return "a batch norm has one of running_mean and running_var (they go together)";
      if (!b->training && !b->running_mean)
        return "a batch norm in eval mode has no running statistics";
      // F.batch_norm's rule (the layer alone says so by name).
      if (b->training && shape_numel(lengths) * x.shape()[0] == 1)
        return "a batch norm in training over one value per channel";
      if (!parameter_ok(b->weight, {channels}) || !parameter_ok(b->bias, {channels}) ||
          !parameter_ok(b->running_mean, {channels}) || !parameter_ok(b->running_var, {channels}))
        return "a batch norm's weight, bias or running statistics are not [C], replicated";
      if (b->training) statistics_at.push_back(windowed);
    } else {
      const auto& n = std::get<ChainGroupNorm>(layer);
      if (n.num_groups < 1 || channels % n.num_groups != 0 || !(n.eps >= 0))
        return "a group norm does not fit its input";
      if (!parameter_ok(n.weight, {channels}) || !parameter_ok(n.bias, {channels}))
        return "a group norm's weight or bias is not [C], replicated";
      statistics_at.push_back(windowed);
    }
  }
  if (windowed < 2)
    return "a chain of fewer than two window layers (convolutions, pools, upsamples, transposed "
           "convolutions) saves no exchange";
  const auto has = [&](auto is) { return std::any_of(layers.begin(), layers.end(), is); };
  if (has([](const ChainLayer& l) { return std::holds_alternative<ChainPool>(l); }) &&
      has([](const ChainLayer& l) {
        const auto* c = std::get_if<ChainConv>(&l);
        return c && c->params.padding_mode == PaddingMode::Circular;
      }))
    return "a pool in a chain of circular convolutions (a pool pads its own way, not around)";
  // A layer that changes the length (a stride, padding not "same"): the
  // padding beyond an edge is then the rank's own business only with
  // zeros (held_padding.h and rings assume every range is "same").
  const bool resampling =
      std::any_of(window_layers.begin(), window_layers.end(), [](const auto& v) {
        return std::any_of(v.begin(), v.end(), [](const auto& d) { return resamples(d); });
      });
  if (resampling && has([](const ChainLayer& l) {
        const auto* c = std::get_if<ChainConv>(&l);
        return c && c->params.padding_mode != PaddingMode::Zeros;
      }))
    return "a chain whose layers change the length (a stride, padding that is not \"same\", an "
           "upsample) pads with zeros only";
  // Strides and upsamples together read as no one window (chain_window).
  for (const auto& dims : window_layers)
    if (detail::chain_upsamples(dims) && std::any_of(dims.begin(), dims.end(), [](const auto& d) {
          return !d.transposed && d.stride != 1;
        }))
      return "a chain with an upsample has a strided layer";
  return std::nullopt;
}

// The refusal's rules on the plan of each dim (detail::chain_*_refusal):
// a simulation per norm and dim, the refusal's costliest part.
std::optional<std::string> plan_refusal(const DTensor& x, const ChainGeometry& geometry) {
  for (std::size_t d = 0; d < geometry.window_layers.size(); ++d) {
    const auto& dims = geometry.window_layers[d];
    for (const std::size_t first : geometry.statistics_at)
      if (auto why = detail::chain_statistics_refusal(x.shape()[d + 2], first, dims)) return why;
    const bool reads_held = std::any_of(
        dims.begin(), dims.end(), [](const auto& c) { return c.boundary == Boundary::Reflect; });
    const std::int64_t length = x.shape()[d + 2];
    if (auto why = detail::chain_boundary_refusal(
            length, reads_held ? smallest_shard(x, static_cast<std::int64_t>(d) + 2) : length,
            dims))
      return why;
  }
  return std::nullopt;
}

std::optional<std::string> refusal(const DTensor& x, const std::vector<ChainLayer>& layers) {
  ChainGeometry geometry;
  if (auto why = layer_refusal(x, layers, geometry)) return why;
  return plan_refusal(x, geometry);
}

// ---- what the forward keeps for the backward -------------------------------

struct NormState {
  Tensor input, output;  // over the layer's range
  norm::Stats stats;
};

struct ChainState {
  bool save = false;
  // Per window layer (convolution, pool): its input, the first's the window.
  std::vector<TiledTensor> window_inputs;
  std::vector<NormState> norms;
  std::vector<Tensor> activation_inputs;  // per layer: an activation's input
};

// The state of the call in progress on this thread: the front end and the
// node hand it to the handlers through dispatch, which carries only values.
thread_local ChainState* t_state = nullptr;

class StateScope {
 public:
  explicit StateScope(ChainState* s) : previous_(t_state) { t_state = s; }
  ~StateScope() { t_state = previous_; }
  StateScope(const StateScope&) = delete;
  StateScope& operator=(const StateScope&) = delete;

 private:
  ChainState* previous_;
};

// ---- the rank's geometry ---------------------------------------------------

struct Geometry {
  std::vector<detail::ChainDimPlan> dims;  // per spatial dim
  bool idle = false;                       // no output on this rank

  // [begin, end) of window layer k's output (k = -1: the window) per dim:
  // the range of every layer up to the next window layer.
  std::pair<std::int64_t, std::int64_t> range(std::size_t d, int k) const {
    const auto& s = k < 0 ? dims[d].steps.front() : dims[d].steps[static_cast<std::size_t>(k)];
    return k < 0 ? std::pair{s.in_begin, s.in_end} : std::pair{s.out_begin, s.out_end};
  }
  // The rank's share of window layer k's output along dim d (k >= 0).
  std::pair<std::int64_t, std::int64_t> share(std::size_t d, int k) const {
    const auto& s = dims[d].steps[static_cast<std::size_t>(k)];
    return {s.owned_begin, s.owned_end};
  }
  // The owned cells of a tensor over window layer k's output range.
  Tensor owned(const Tensor& t, int k) const {
    Tensor v = t;
    for (std::size_t d = 0; d < dims.size(); ++d)
      v = v.narrow(static_cast<std::int64_t>(d) + 2, share(d, k).first - range(d, k).first,
                   share(d, k).second - share(d, k).first);
    return v;
  }
  // What window layer k reads of its input `t` (over its input range):
  // all but the rows a strided chain's first layer skips.
  template <typename T>
  T used(const T& t, std::size_t k) const {
    T v = t;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const auto& s = dims[d].steps[k];
      if (s.skip_left + s.skip_right > 0)
        v = v.narrow(static_cast<std::int64_t>(d) + 2, s.skip_left,
                     s.in_end - s.in_begin - s.skip_left - s.skip_right);
    }
    return v;
  }
  bool skips(std::size_t k) const {
    return std::any_of(dims.begin(), dims.end(), [k](const detail::ChainDimPlan& p) {
      return p.steps[k].skip_left + p.steps[k].skip_right > 0;
    });
  }
  // The cells of a tensor over window layer k's range that the rank does not
  // own, as disjoint slabs: along each dim d, the part before and after the
  // owned range, spanning the owned range on the dims before d and the
  // whole range on the dims after.
  std::vector<Tensor> halo_slabs(const Tensor& t, int k) const {
    std::vector<Tensor> out;
    out.reserve(2 * dims.size());
    Tensor core = t;  // owned on the dims done so far
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const auto dim = static_cast<std::int64_t>(d) + 2;
      const auto [begin, end] = range(d, k);
      const std::int64_t o0 = share(d, k).first - begin, o1 = share(d, k).second - begin;
      out.push_back(core.narrow(dim, 0, o0));
      out.push_back(core.narrow(dim, o1, end - begin - o1));
      core = core.narrow(dim, o0, o1 - o0);
    }
    return out;
  }
  bool owns_all(int k) const {
    for (std::size_t d = 0; d < dims.size(); ++d)
      if (range(d, k) != share(d, k)) return false;
    return true;
  }
  // Convolution k's local padding (left, right) per dim.
  ConvParams::Padding padding(std::size_t k) const {
    ConvParams::Padding out;
    for (const auto& dim : dims)
      out.emplace_back(dim.steps[k].pad_left, dim.steps[k].pad_right);
    return out;
  }
  // Whether convolution k fills its local padding from the rows it holds
  // (reflect, replicate: held_padding.h): it then runs on a padded copy of
  // its input and the kernel pads nothing.
  bool fills(const Layer& l, std::size_t k) const {
    if (idle || (l.boundary != Boundary::Reflect && l.boundary != Boundary::Replicate))
      return false;
    for (const auto& [left, right] : padding(k))
      if (left > 0 || right > 0) return true;
    return false;
  }
  // The kernel's parameters: the local padding as zeros, or none where the
  // convolution fills it (a ring has none).
  ConvParams params(const Layer& l, std::size_t k) const {
    ConvParams p = l.params;
    p.padding = fills(l, k) ? ConvParams::Padding(dims.size(), {0, 0}) : padding(k);
    p.padding_mode = PaddingMode::Zeros;
    return p;
  }
};

// `t` ([N, C, spatial...]) with room for `pads` around its spatial dims.
Shape padded_shape(Shape t, const ConvParams::Padding& pads) {
  for (std::size_t d = 0; d < pads.size(); ++d)
    t[d + 2] += pads[d].first + pads[d].second;
  return t;
}

// The window layers along spatial dim `d`, as the plan reads them.
std::vector<detail::ChainWindowDim> window_layers(const Chain& c, std::size_t d) {
  std::vector<detail::ChainWindowDim> out;
  for (const auto& l : c.layers)
    if (l.windowed()) out.push_back(l.dims[d]);
  return out;
}

std::vector<WindowDim> window_dims(const Chain& c, std::int64_t spatial) {
  std::vector<WindowDim> dims;
  for (std::int64_t d = 0; d < spatial; ++d)
    dims.push_back(detail::chain_window(window_layers(c, static_cast<std::size_t>(d))));
  return dims;
}

Geometry geometry_of(const Chain& c, const WindowExchange& engine, const Shape& global) {
  Geometry g;
  g.idle = !engine.has_output();
  for (std::size_t d = 0; d < engine.spans().size(); ++d) {
    const WindowSpan& s = engine.spans()[d];
    const std::int64_t o0 = s.output.offset, o1 = s.output.offset + s.output.length;
    const auto convs = window_layers(c, d);
    std::int64_t begin = s.origin, end = s.origin + s.length;
    if (g.idle) {  // the window the rank would read, were there output on every dim
      const WindowDim w = detail::chain_window(convs);
      const bool ring = detail::chain_is_ring(convs);
      const auto [first, last] = w.reads(global[d + 2], o0, o1);
      begin = ring ? first : std::max<std::int64_t>(0, first);
      end = ring ? last + 1 : std::min(global[d + 2], std::max(begin, last + 1));
    }
    g.dims.push_back(detail::plan_chain_dim(global[d + 2], o0, o1, begin, end, convs));
  }
  return g;
}

Shape range_shape(const Shape& nc, const Geometry& g, int k) {
  Shape s = nc;
  for (std::size_t d = 0; d < g.dims.size(); ++d)
    s.push_back(g.range(d, k).second - g.range(d, k).first);
  return s;
}

Tensor local_or_none(const std::vector<DTensor>& in, int index) {
  return index < 0 ? Tensor() : in.at(static_cast<std::size_t>(index)).to_local().contiguous();
}

// ---- the handlers ----------------------------------------------------------

// An activation layer on local tensors ({x}, or {grad_output, x} for the
// backward), by its operator's own kernel (the same arithmetic as the
// layer run alone).
Tensor activation(const Layer& l, std::vector<OpArg> args, bool backward) {
  if (l.op == "leaky_relu") args.emplace_back(l.negative_slope);
  if (l.op == "gelu") args.emplace_back(std::string(gelu_approximate_name(l.approximate)));
  const std::string op = backward ? l.op + "_backward" : l.op;
  const Tensor& t = std::get<Tensor>(args.front());
  const OpSchema schema(op, args);
  return op_kernel(op, t.device().type, t.dtype())(KernelCall{schema, std::move(args), {}, {}})
      .at(0);
}

// Pool layer `l`'s taps per spatial dim: window layer k's outputs reading
// the range of the layer before it.
std::vector<kernels::PoolTaps> pool_taps_of(const Layer& l, const Geometry& g, int k,
                                            std::int64_t spatial) {
  std::vector<kernels::PoolTaps> out;
  for (std::int64_t d = 0; d < spatial; ++d) {
    const auto i = static_cast<std::size_t>(d);
    const PoolParams& p = l.pool_params;
    const WindowDim dim = WindowDim::sliding(p.kernel[i], p.stride[i], p.dilation[i],
                                             p.padding[i].first, p.padding[i].second);
    const detail::ChainStep& s = g.dims[i].steps[static_cast<std::size_t>(k)];
    const WindowSpan span{
        d + 2, {s.out_begin, s.out_end - s.out_begin}, s.in_begin, s.in_end - s.in_begin};
    out.push_back(window::pool_taps(dim, g.dims[i].lengths[static_cast<std::size_t>(k)], span));
  }
  return out;
}

// Upsample layer `l`'s taps per spatial dim, likewise (`backward`: PyTorch's
// backward index rule, resample_taps.h).
std::vector<kernels::ResampleTaps> resample_taps_of(const Layer& l, const Geometry& g, int k,
                                                    bool backward) {
  std::vector<kernels::ResampleTaps> out;
  for (std::size_t i = 0; i < l.resample.size(); ++i) {
    const detail::ChainStep& s = g.dims[i].steps[static_cast<std::size_t>(k)];
    const WindowSpan span{static_cast<std::int64_t>(i) + 2,
                          {s.out_begin, s.out_end - s.out_begin},
                          s.in_begin,
                          s.in_end - s.in_begin};
    out.push_back(window::resample_taps(
        l.resample[i], g.dims[i].lengths[static_cast<std::size_t>(k)], span, backward));
  }
  return out;
}

// A transposed convolution's full output of its held input along each dim:
// global outputs from in_begin * stride - padding on, which a convolution's
// backward-data with no padding computes (as conv_transpose alone does per
// tile); and where the layer's range starts in it.
struct TransposedSpan {
  std::vector<std::int64_t> length, offset;
};

TransposedSpan transposed_span(const Layer& l, const Geometry& g, int k) {
  TransposedSpan t;
  for (std::size_t d = 0; d < l.dims.size(); ++d) {
    const detail::ChainStep& s = g.dims[d].steps[static_cast<std::size_t>(k)];
    const detail::ChainWindowDim& c = l.dims[d];
    t.length.push_back((s.in_end - s.in_begin - 1) * c.stride + c.extent);
    t.offset.push_back(s.out_begin - (s.in_begin * c.stride - c.pad_left));
  }
  return t;
}

// `t` ([N, C, the span...]) cut to the layer's range.
Tensor range_of_span(const Tensor& t, const TransposedSpan& span, const Geometry& g, int k) {
  Tensor v = t;
  for (std::size_t d = 0; d < span.offset.size(); ++d)
    v = v.narrow(static_cast<std::int64_t>(d) + 2, span.offset[d],
                 g.range(d, k).second - g.range(d, k).first);
  return v;
}

Shape span_shape(std::int64_t batch, std::int64_t channels, const TransposedSpan& span) {
  Shape shape{batch, channels};
  shape.insert(shape.end(), span.length.begin(), span.length.end());
  return shape;
}

// A transposed convolution layer on local tensors over its ranges: `x` its
// input, `y` its output (written).
void conv_transpose_forward(const Layer& l, const TransposedSpan& span,
                            const LocalConvKernels& kernels, const Tensor& w, const Tensor& bias,
                            const Tensor& x, Tensor y, const Geometry& g, int k) {
  const Tensor full =
      kernels.backward_data(x.contiguous(), w, span_shape(x.size(0), y.size(1), span),
                            tconv::local_convolution(l.transposed));
  y.copy_(range_of_span(full, span, g, k));
  if (bias.defined() && y.numel() > 0)
    run_kernel(kernels::kChannelBias, y.device().type, y.dtype(), {y, bias});
}

// A pool layer on local tensors over its ranges ([N, C, spatial...]).
void pool_forward(const Layer& l, const std::vector<kernels::PoolTaps>& taps, const Tensor& x,
                  const Tensor& y) {
  const DeviceType device = x.device().type;
  if (l.average)
    run_kernel(kernels::kAvgPoolForward, device, x.dtype(), {x, taps, l.divisor, y});
  else
    run_kernel(kernels::kMaxPoolForward, device, x.dtype(), {x, taps, y});
}

// Its backward: the input's gradient `gx` (overwritten) from the output's
// `gy`; a halo cell's is this rank's part, as the conv's.
void pool_backward(const Layer& l, const std::vector<kernels::PoolTaps>& taps, const Tensor& x,
                   const Tensor& gy, const Tensor& gx) {
  const DeviceType device = x.device().type;
  if (l.average)
    run_kernel(kernels::kAvgPoolBackward, device, x.dtype(), {gy, taps, l.divisor, gx});
  else
    run_kernel(kernels::kMaxPoolBackward, device, x.dtype(), {x, gy, taps, gx});
}

// The spatial dim along which the rank's window reaches beyond its own
// input, when there is exactly one: its exchange is the one still in
// flight after WindowExchange::post().
std::optional<std::size_t> only_halo_dim(const Geometry& g) {
  std::optional<std::size_t> found;
  for (std::size_t d = 0; d < g.dims.size(); ++d) {
    const auto [begin, end] = g.range(d, -1);
    if (begin == g.dims[d].owned_begin && end == g.dims[d].owned_end) continue;
    if (found) return std::nullopt;
    found = d;
  }
  return found;
}

// Samples [begin, begin + length) of the rank's batch.
struct BatchPiece {
  std::int64_t begin = 0, length = 0;
};

// The piece's samples of `t` ([batch, ...]).
Tensor samples_of(const Tensor& t, const BatchPiece& p) {
  return t.narrow(0, p.begin, p.length);
}

// The piece's rows of per-statistic records (`rows`: the same number for
// every sample of the `batch`; a group norm's are its groups).
Tensor statistics_of(const Tensor& rows, std::int64_t batch, const BatchPiece& p) {
  // The whole batch's are all of them (a batch norm's are not per sample).
  if (p.begin == 0 && p.length == batch) return rows;
  const std::int64_t per_sample = batch > 0 ? rows.size(0) / batch : 0;
  return rows.narrow(0, p.begin * per_sample, p.length * per_sample);
}

// The ranks a norm's statistics are merged over: a group norm's per sample
// (the ranks holding the same samples), a batch norm's over the batch too.
struct Reductions {
  norm::ReductionPlan group, batch;
  Reductions(const DTensor& x)
      : group(norm::plan_reduction(norm::NormKind::Group, x.mesh(), x.placements())),
        batch(norm::plan_reduction(norm::NormKind::Batch, x.mesh(), x.placements())) {}
  const norm::ReductionPlan& of(const Layer& l) const { return l.batch ? batch : group; }
};

// The norm kernels' view of a norm's input `t` (over the layer's range).
kernels::NormLayout layout_over(const Layer& l, const Tensor& t) {
  return norm::layout_of(l.kind(), t.shape(), t.size(1), l.num_groups);
}

// The forward runs the batch in two pieces when its norms' statistics cross
// ranks: one piece's statistics travel while the other piece's convolution
// runs, so of a chain's 2 x (norms) waits only the last piece's last one is
// left (a group norm's statistics are per sample, so the pieces' are the
// whole batch's). Every rank of a reduction group holds the same samples,
// so all cut the batch alike. A batch norm's statistics span the samples:
// a chain with one in training runs the batch whole.
std::vector<BatchPiece> batch_pieces(const Chain& c, const Reductions& reductions,
                                     std::int64_t batch) {
  bool communicates = false;
  for (const Layer& l : c.layers) {
    if (!l.statistics()) continue;
    if (l.batch) return {{0, batch}};
    communicates = communicates || reductions.of(l).communicates();
  }
  if (!communicates || batch < 2) return {{0, batch}};
  return {{0, batch / 2}, {batch / 2, batch - batch / 2}};
}

std::vector<DTensor> forward_handler(OpCall& call) {
  const Chain& c = chain_of(call.schema(), false);
  const auto in = call.redistributed_inputs();
  const DTensor& x = in[0];
  const DeviceType device = x.to_local().device().type;
  const DType dtype = x.dtype();
  const auto kernels = local_conv_kernels(x.to_local().device(), dtype);
  ChainState scratch;
  ChainState& state = t_state ? *t_state : scratch;
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

std::vector<DTensor> backward_handler(OpCall& call) {
  DTENSOR_CHECK_ARG(t_state && !t_state->window_inputs.empty(), kBackwardOp,
                    "runs only inside backward() of a recorded halo_chain");
  const ChainState& state = *t_state;
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

// ---- definitions -----------------------------------------------------------

void validate(const OpSchema& s, bool backward) {
  const DTensor& x =
      backward ? decoded<halo::ChainBackwardCall>(s).input : decoded<halo::ChainCall>(s).input;
  const auto& layers =
      backward ? decoded<halo::ChainBackwardCall>(s).layers : decoded<halo::ChainCall>(s).layers;
  chain_of(s, backward);  // a layer that does not fit the input's rank, named
  const auto why = refusal(x, layers);
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
  register_op_handler(kForwardOp, forward_handler, false, options);
  register_op_handler(kBackwardOp, backward_handler, false, options);
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
  return refusal(input, layers);
}

std::optional<std::string> halo_chain_input_refusal(const DTensor& input) {
  return input_refusal(input);
}

bool halo_chain_pays(const DTensor& input, const std::vector<ChainLayer>& layers) {
  if (!config().halo_fusion) return false;
  // The price before the plan's rules: most chains a deep Sequential tries
  // do not pay, and pricing one reads its geometry once where the plan's
  // rules simulate every norm on every dim.
  ChainGeometry geometry;
  return !layer_refusal(input, layers, geometry) && halo_chain_saving(input, layers) > 0 &&
         !plan_refusal(input, geometry);
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
