// What a halo chain refuses to fuse (halo_chain_refusal.h).
#include "ops/window/halo_chain_refusal.h"

#include <algorithm>
#include <cmath>

#include "dtensor/core/errors.h"
#include "dtensor/ops/autocast.h"
#include "ops/window/conv_transpose_call.h"
#include "ops/window/halo_chain_layers.h"
#include "ops/window/upsample_geometry.h"

namespace dtensor::halo::chain {
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace dtensor::halo::chain
