// The cost model of one exchange per chain (dtensor/ops/halo_chain.h): what
// fusing a chain saves per training step against what it recomputes, from
// the chain's geometry, the link's latency and bandwidth and the rank's
// compute rate (docs/halo.md, "One exchange per chain").
#include <algorithm>
#include <cmath>
#include <vector>

#include "dtensor/core/config.h"
#include "dtensor/ops/halo_chain.h"
#include "ops/window/upsample_geometry.h"

namespace dtensor {
namespace {

// The rate of a link between two ranks (a message's fixed cost is the mesh
// group's estimate, ProcessGroup::message_seconds), and the rate the
// recomputed overlap runs at: a few more rows of a convolution that runs
// anyway, so oneDNN's f32 direct convolution's own rate, one core. Its
// primitives in the U-Net's training step (ONEDNN_VERBOSE, 3x3, 8-32
// channels, 2x8x128x128 at P = 2, AVX-512): 93-114 GFLOP/s forward,
// backward-data and backward-weights. docs/halo.md.
constexpr double kLinkBytesPerSecond = 2e9;
constexpr double kFlopsPerSecond = 90e9;
// A convolution that pads by reflection or replication inside the chain
// runs on a padded copy of its input (held_padding.h), forward, and its
// gradient comes back through one (the backward): two copies of the input
// into fresh buffers. Measured on a DoubleConv-like block (two 3x3
// convolutions of 16 channels with group norms, 2x16x128x128 at P = 2,
// halo_chain called directly, three rounds): reflect 6.23-6.53 ms against
// zeros 4.61-5.90 ms a forward and backward, 0.6-1.9 ms for ~4.4 MB
// copied; 3 GB/s is its middle.
constexpr double kPaddedCopyBytesPerSecond = 3e9;
// What a window layer's own exchange costs beyond its messages: the call's
// exchange planned, its buffers packed and unpacked, and its convolution
// cut into the rows that wait for the halo and those that do not (more
// kernel calls). Measured with `dtensor-op conv --bench` (a 3x3
// convolution at P = 2 through shared memory against the same call on the
// shard alone, 2x8x16x16 to 2x16x128x128): 39-52 us more forward and
// 50-77 us more backward, whatever the size.
constexpr double kExchangeSeconds = 50e-6;

}  // namespace

double halo_chain_saving(const DTensor& x, const std::vector<ChainLayer>& layers) {
  const auto& link = config().sim_link;
  const double latency =
      x.mesh().get_mesh_group()->message_seconds() + (link ? link->latency_us * 1e-6 : 0.0);
  const double bandwidth = link && link->gbit ? *link->gbit * 1e9 / 8 : kLinkBytesPerSecond;
  const auto spatial = static_cast<std::size_t>(x.ndim() - 2);
  // The shard at mesh coordinate 0 (the largest under the chunk rule), not
  // this rank's own: with uneven shards each rank would otherwise price the
  // chain on its own shard, and near the break-even point some ranks would
  // fuse (a collective) while the others ran the layers one by one.
  const Shape local = x.spec().local_shape_at(
      std::vector<std::int64_t>(static_cast<std::size_t>(x.mesh().ndim()), 0));
  // Into how many shards each spatial dim is cut (1: not sharded).
  std::vector<std::int64_t> shards(spatial, 1);
  for (std::size_t m = 0; m < x.placements().size(); ++m) {
    const Placement& p = x.placements()[m];
    if (p.is_shard() && p.dim() >= 2)
      shards[static_cast<std::size_t>(p.dim() - 2)] *= x.mesh().size(static_cast<std::int64_t>(m));
  }
  auto sharded = [&](std::size_t d) { return shards[d] > 1; };
  // A slab of the local shard `depth` cells deep across dim d, per channel,
  // on a grid the strides before it made `scale` times coarser per dim.
  auto slab = [&](std::size_t d, double depth, const std::vector<double>& scale) {
    double cells = static_cast<double>(local[0]) * depth;
    for (std::size_t e = 0; e < spatial; ++e)
      if (e != d) cells *= static_cast<double>(local[e + 2]) / scale[e];
    return cells;
  };
  // The window layers in forward order: what each reads beyond its input
  // per dim, summed over both sides (its extent - 1), its input's channels,
  // and the flops of an output cell in the forward, backward-data and
  // backward-weights (a pool's: a tap per cell each way).
  // (Per dim also its stride, and how much coarser its input's grid is than
  // the chain's input: the strides before it multiplied.)
  struct WindowLayer {
    std::vector<double> reach, stride, scale, pad_left;
    double channels = 0, flops = 0;
    // Whether, run alone, it exchanges a halo along dim d: not where its
    // windows neither overlap nor pad on the left (a pool of stride =
    // kernel, a 1x1 convolution), on shards its stride divides.
    bool exchanges(std::size_t d) const { return reach[d] >= stride[d] || pad_left[d] > 0; }
  };
  std::vector<WindowLayer> windowed;
  std::vector<const ChainConv*> convs;
  double channels = static_cast<double>(x.shape()[1]);
  std::vector<double> scale(spatial, 1.0);
  for (const auto& layer : layers) {
    WindowLayer wl;
    wl.channels = channels;
    wl.scale = scale;
    if (const auto* c = std::get_if<ChainConv>(&layer)) {
      convs.push_back(c);
      const Shape& w = c->weight.shape();
      const ConvParams p = c->params.expanded(static_cast<std::int64_t>(spatial));
      double taps = 1;
      for (std::size_t d = 0; d < spatial; ++d) {
        wl.reach.push_back(static_cast<double>(p.dilation[d] * (w[d + 2] - 1)));
        wl.stride.push_back(static_cast<double>(p.stride[d]));
        wl.pad_left.push_back(static_cast<double>(p.padding[d].first));
        taps *= static_cast<double>(w[d + 2]);
      }
      wl.flops = 3 * 2.0 * static_cast<double>(w[0] * w[1]) * taps;
      channels = static_cast<double>(w[0]);
    } else if (const auto* pool = std::get_if<ChainPool>(&layer)) {
      const PoolParams p = pool->params.expanded(static_cast<std::int64_t>(spatial));
      double taps = 1;
      for (std::size_t d = 0; d < spatial; ++d) {
        wl.reach.push_back(static_cast<double>(p.dilation[d] * (p.kernel[d] - 1)));
        wl.stride.push_back(static_cast<double>(p.stride[d]));
        wl.pad_left.push_back(static_cast<double>(p.padding[d].first));
        taps *= static_cast<double>(p.kernel[d]);
      }
      wl.flops = 2 * taps * channels;
    } else if (const auto* t = std::get_if<ChainConvTranspose>(&layer)) {
      // Input i writes outputs i s - p + [0, e): a stride of 1 / s, and an
      // output reads ceil(e / s) inputs, one more than its own where the
      // windows overlap (the U-Net's kernel = stride reads no neighbour).
      const Shape& w = t->weight.shape();
      const ConvTransposeParams p = t->params.expanded(static_cast<std::int64_t>(spatial));
      double taps = 1;
      for (std::size_t d = 0; d < spatial; ++d) {
        const std::int64_t extent = p.dilation[d] * (w[d + 2] - 1) + 1;
        const std::int64_t reads = (extent + p.stride[d] - 1) / p.stride[d];  // ceil(e / s)
        wl.reach.push_back(static_cast<double>(reads - 1));
        wl.stride.push_back(1.0 / static_cast<double>(p.stride[d]));
        wl.pad_left.push_back(0.0);
        taps *= static_cast<double>(w[d + 2]) / static_cast<double>(p.stride[d]);
      }
      wl.flops = 3 * 2.0 * static_cast<double>(w[0] * w[1]) * taps;
      channels = static_cast<double>(w[1] * p.groups);
    } else if (const auto* u = std::get_if<ChainUpsample>(&layer)) {
      // By a whole factor f (halo_chain_refusal): a stride of 1 / f; linear
      // reads a neighbour on each side, nearest none.
      const bool linear = u->params.mode == UpsampleMode::Linear;
      Shape shape{1, static_cast<std::int64_t>(channels)};
      for (std::size_t d = 0; d < spatial; ++d)
        shape.push_back(std::llround(static_cast<double>(x.shape()[d + 2]) / scale[d]));
      const window::ExpandedUpsample e = window::expand_upsample(shape, u->params);
      for (std::size_t d = 0; d < spatial; ++d) {
        wl.reach.push_back(linear ? 2.0 : 0.0);
        wl.stride.push_back(static_cast<double>(shape[d + 2]) /
                            static_cast<double>(e.output_size[d]));
        wl.pad_left.push_back(linear ? 1.0 : 0.0);
      }
      wl.flops = 2 * (linear ? std::pow(2.0, static_cast<double>(spatial)) : 1.0) * channels;
    } else {
      continue;
    }
    for (std::size_t d = 0; d < spatial; ++d)
      scale[d] *= wl.stride[d];
    windowed.push_back(std::move(wl));
  }
  // A ring (every convolution pads circularly; it holds no pool) also
  // widens its ranges along the dims that are not sharded: the wrap is
  // recomputed there too.
  const bool ring = convs.size() == windowed.size() &&
                    std::all_of(convs.begin(), convs.end(), [](const ChainConv* c) {
                      return c->params.padding_mode == PaddingMode::Circular;
                    });
  const double item = static_cast<double>(dtype_size(x.dtype()));
  double unfused_bytes = 0, fused_bytes = 0, recompute_flops = 0;
  // Forward and backward: the exchanges of the window layers that exchange
  // alone (each a send and a receive to each neighbour along the dim) are
  // saved but one; the bytes move into the one exchange.
  double saved_messages = 0;
  std::vector<bool> exchanges_alone(windowed.size(), false);
  for (std::size_t d = 0; d < spatial; ++d) {
    if (!sharded(d) && !ring) continue;
    // The rank priced has a neighbour on each side, or one where the dim is
    // cut in two (no ring): its slabs are then half as deep (the reaches
    // below are both sides' sums).
    const double sides = ring || shards[d] > 2 ? 2.0 : 1.0;
    // What the layers after k read beyond the share, in cells of k's
    // output's grid.
    double later = 0, exchanging = 0, strides = 1;
    for (std::size_t k = windowed.size(); k-- > 0;) {
      const WindowLayer& wl = windowed[k];
      std::vector<double> out_scale = wl.scale;
      for (std::size_t e = 0; e < spatial; ++e)
        out_scale[e] *= wl.stride[e];
      recompute_flops += wl.flops * slab(d, later * sides / 2, out_scale);
      if (sharded(d) && wl.exchanges(d)) {
        unfused_bytes += slab(d, wl.reach[d] * sides / 2, wl.scale) * wl.channels * item;
        exchanges_alone[k] = true;
        ++exchanging;
      }
      later = later * wl.stride[d] + wl.reach[d];
      strides *= wl.stride[d];
    }
    if (!sharded(d)) continue;
    // The one window reaches extent - strides beyond the share's input
    // (where the chain upsamples, about its extent).
    fused_bytes += slab(d, std::max(0.0, later - std::max(0.0, strides - 1)) * sides / 2,
                        std::vector<double>(spatial, 1.0)) *
                   static_cast<double>(x.shape()[1]) * item;
    saved_messages += 2 * sides * std::max(0.0, exchanging - 1);
  }
  // An exchange's own cost, once per layer that exchanges alone (along any
  // dim), saved for all but one.
  const auto exchange_calls =
      static_cast<double>(std::count(exchanges_alone.begin(), exchanges_alone.end(), true));
  const double saved = 2 * (saved_messages * latency + (unfused_bytes - fused_bytes) / bandwidth +
                            std::max(0.0, exchange_calls - 1) * kExchangeSeconds);
  // The padded copies (every rank's range meets an edge of some padded dim,
  // or waits for one whose does).
  double copied_bytes = 0;
  double cells = static_cast<double>(local[0]);
  for (std::size_t e = 0; e < spatial; ++e)
    cells *= static_cast<double>(local[e + 2]);
  for (const ChainConv* c : convs) {
    const ConvParams p = c->params.expanded(static_cast<std::int64_t>(spatial));
    const bool pads = std::any_of(p.padding.begin(), p.padding.end(),
                                  [](const auto& lr) { return lr.first > 0 || lr.second > 0; });
    if (pads &&
        (p.padding_mode == PaddingMode::Reflect || p.padding_mode == PaddingMode::Replicate))
      copied_bytes += 2 * cells * static_cast<double>(c->weight.shape()[1] * p.groups) * item;
  }
  return saved - recompute_flops / kFlopsPerSecond - copied_bytes / kPaddedCopyBytesPerSecond;
}

}  // namespace dtensor
