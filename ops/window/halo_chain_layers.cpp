// A halo chain's layers decoded from its call (halo_chain_layers.h).
#include "ops/window/halo_chain_layers.h"

#include <algorithm>

#include "dtensor/core/errors.h"
#include "ops/window/conv_transpose_call.h"
#include "ops/window/halo_chain_call.h"
#include "ops/window/upsample_geometry.h"

namespace dtensor::halo::chain {

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

}  // namespace dtensor::halo::chain
