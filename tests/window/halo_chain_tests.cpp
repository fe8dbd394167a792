// One halo exchange per chain (dtensor/ops/halo_chain.h), on real ranks: a
// random chain of "same" convolutions, group norms and batch norms (with and
// without relu, weights and biases; batch norms in training, with and
// without running statistics, and in eval mode), activations and stride-1
// max and average pools (every padding mode; in zero-padded chains a
// quarter of the convolutions and pools strided or padded otherwise than
// "same", or, in a third of them, upsamples and transposed convolutions
// between the convolutions) run fused equals the same
// layers run one by one, forward, every gradient (the input's and each
// parameter's) and the batch norms' updated running statistics, in f64 to
// 1e-12 relative. Random shapes of one to three
// spatial dims small enough that shards are uneven or empty and halos reach
// several ranks away, on 1-D meshes of 2 and 3 ranks and a 2x2 mesh with
// two spatial dims (or the batch and a spatial dim) sharded. Also: nn::Sequential fuses exactly
// where the cost model and DTENSOR_HALO_FUSION say so, and the trainer's kind of chain runs as one
// exchange (counted).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/logging.h"
#include "dtensor/nn/halo_region.h"
#include "dtensor/nn/layers.h"
#include "dtensor/ops/activations.h"
#include "dtensor/ops/autocast.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/halo_chain.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/window_ops.h"
#include "dtensor/placement/dtensor.h"
#include "tests/support/multiprocess.h"
#include "tests/support/scoped_config.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

std::int64_t uni(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// A layer with its global parameters (f64), drawn once, distributed per run.
struct LayerSpec {
  bool conv = false;
  Tensor weight, bias;  // undefined: none
  ConvParams params;
  std::int64_t groups = 1;
  bool relu = false;
  bool batch = false;                               // a norm: batch_norm, else group_norm
  bool training = true;                             // a batch norm's
  Tensor running_mean, running_var;                 // a batch norm's; undefined: none
  std::optional<ChainActivation> activation{};      // set: an activation layer
  std::optional<ChainPool> pool{};                  // set: a pool layer
  std::optional<ChainUpsample> upsample{};          // set: an upsample layer
  std::optional<ConvTransposeParams> transposed{};  // set: a transposed convolution (weight, bias)
};

// A random activation layer (after a convolution or a norm).
LayerSpec random_activation(std::mt19937_64& rng) {
  const char* ops[] = {"relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh"};
  LayerSpec a;
  a.activation = ChainActivation{ops[uni(rng, 0, 5)], 0.01 * static_cast<double>(uni(rng, 1, 30)),
                                 uni(rng, 0, 1) ? GeluApproximate::Tanh : GeluApproximate::None};
  return a;
}

// A random stride-1 pool whose output is as large as its input: each
// padding side within half the kernel (PyTorch's rule), max pools dilated
// where that still allows it.
LayerSpec random_pool(std::mt19937_64& rng, std::int64_t spatial) {
  LayerSpec l;
  ChainPool pool;
  pool.average = uni(rng, 0, 1) == 1;
  PoolParams& p = pool.params;
  p.kernel.clear();
  p.padding.clear();
  p.dilation.clear();
  p.stride.assign(static_cast<std::size_t>(spatial), 1);
  for (std::int64_t d = 0; d < spatial; ++d) {
    const std::int64_t kernel = uni(rng, 1, 4);
    const std::int64_t dilation = !pool.average && kernel == 2 && uni(rng, 0, 1) ? 2 : 1;
    const std::int64_t reach = dilation * (kernel - 1), half = kernel / 2;
    const std::int64_t left =
        uni(rng, std::max<std::int64_t>(0, reach - half), std::min(half, reach));
    p.kernel.push_back(kernel);
    p.dilation.push_back(dilation);
    p.padding.emplace_back(left, reach - left);
  }
  p.count_include_pad = uni(rng, 0, 1) == 1;
  if (pool.average && uni(rng, 0, 3) == 0) p.divisor_override = uni(rng, 1, 5);
  l.pool = pool;
  return l;
}

// A window layer's output length for an input of `length` (PyTorch's floor).
std::int64_t output_length(std::int64_t length, std::int64_t extent, std::int64_t stride,
                           std::pair<std::int64_t, std::int64_t> padding) {
  const std::int64_t span = length + padding.first + padding.second - extent;
  return span < 0 ? 0 : span / stride + 1;
}

// Makes a layer of a zero-padded chain resample along some dims: stride 2,
// or padding that is not "same" (each side at most `caps`), where the
// output keeps at least one cell; `lengths` follow.
void resample(std::mt19937_64& rng, std::vector<std::int64_t>& stride, ConvParams::Padding& padding,
              const std::vector<std::int64_t>& extents, const std::vector<std::int64_t>& caps,
              std::vector<std::int64_t>& lengths) {
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    const std::int64_t s = uni(rng, 1, 2);
    const std::pair<std::int64_t, std::int64_t> pad{uni(rng, 0, caps[d]), uni(rng, 0, caps[d])};
    if (output_length(lengths[d], extents[d], s, pad) < 1) continue;
    stride[d] = s;
    padding[d] = pad;
  }
  for (std::size_t d = 0; d < lengths.size(); ++d)
    lengths[d] = output_length(lengths[d], extents[d], stride[d], padding[d]);
}

struct Case {
  Shape shape;
  Placements placements;
  std::vector<LayerSpec> layers;
  bool input_grad = true;      // the input requires grad (else only the parameters)
  bool ring_too_wide = false;  // drawn circular, but a padding wraps more than once
  bool resamples = false;      // a layer has a stride or padding that is not "same"
  bool upsamples = false;      // an upsample layer (then nothing strided)
  std::string what;
};

Case random_case(std::mt19937_64& rng, const DeviceMesh& mesh, std::uint64_t seed) {
  Case c;
  // Volumes too (three spatial dims, kept small), cut along one or two dims.
  const std::int64_t spatial = mesh.ndim() == 2 ? uni(rng, 2, 3) : uni(rng, 1, 3);
  c.shape = {uni(rng, 1, 3), uni(rng, 1, 4)};  // 2 and 3: the forward runs the batch in two pieces
  for (std::int64_t d = 0; d < spatial; ++d)
    c.shape.push_back(uni(rng, 1, spatial == 3 ? 7 : 12));
  if (mesh.ndim() == 2) {
    const std::int64_t a = 2 + uni(rng, 0, spatial - 1);
    std::int64_t b = 2 + uni(rng, 0, spatial - 2);
    b += b >= a ? 1 : 0;  // another spatial dim
    c.placements =
        uni(rng, 0, 2) == 0 ? Placements{Shard(0), Shard(a)} : Placements{Shard(a), Shard(b)};
  } else {
    c.placements = {Shard(2 + uni(rng, 0, spatial - 1))};
  }
  std::int64_t channels = c.shape[1];
  std::vector<std::int64_t> lengths(c.shape.begin() + 2, c.shape.end());  // the layers' inputs'
  const std::int64_t convs = uni(rng, 2, 3);
  // Padding modes: zeros (half the cases), a mix of zeros, reflect and
  // replicate, or circular throughout (a ring).
  const std::int64_t family = uni(rng, 0, 3);
  const PaddingMode mixed[] = {PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate};
  // Zero-padded chains, a third: an upsample or two between the
  // convolutions (nearest or linear, by whole factors, sized by scale
  // factor or by size), and nothing strided.
  const bool upsampling = family < 2 && uni(rng, 0, 2) == 0;
  std::uint64_t draw = seed;
  for (std::int64_t k = 0; k < convs; ++k) {
    if (upsampling && k > 0 && (!c.upsamples || (spatial < 3 && uni(rng, 0, 2) == 0)) &&
        uni(rng, 0, 2) > 0) {
      // A transposed convolution: its window at least as wide as its
      // stride, output_padding at most its padding (and under the stride).
      LayerSpec up;
      ConvTransposeParams p;
      p.stride.clear();
      p.padding.clear();
      p.output_padding.clear();
      p.dilation.clear();
      const std::int64_t out = uni(rng, 1, 3);
      Shape w{channels, out};
      for (std::int64_t d = 0; d < spatial; ++d) {
        const std::int64_t stride = uni(rng, 1, spatial == 3 ? 2 : 3);
        const std::int64_t dilation = uni(rng, 1, 2);
        const std::int64_t kernel = uni(rng, (stride + dilation - 2) / dilation + 1, 4);
        const std::int64_t extent = dilation * (kernel - 1) + 1;
        const std::int64_t padding = uni(rng, 0, extent - 1);
        auto& length = lengths[static_cast<std::size_t>(d)];
        std::int64_t output_padding =
            uni(rng, 0, std::min(padding, std::max(stride, dilation) - 1));
        // Every output length at least 1.
        if ((length - 1) * stride - 2 * padding + extent + output_padding < 1) {
          output_padding = 0;
          p.padding.push_back(0);
        } else {
          p.padding.push_back(padding);
        }
        p.stride.push_back(stride);
        p.dilation.push_back(dilation);
        p.output_padding.push_back(output_padding);
        w.push_back(kernel);
        length = (length - 1) * stride - 2 * p.padding.back() + extent + output_padding;
      }
      up.transposed = p;
      up.weight = Tensor::rand(w, DType::F64, ++draw);
      if (uni(rng, 0, 1)) up.bias = Tensor::rand({out}, DType::F64, ++draw);
      channels = out;
      c.layers.push_back(up);
      c.upsamples = true;
    } else if (upsampling && k > 0 && (!c.upsamples || (spatial < 3 && uni(rng, 0, 2) == 0))) {
      LayerSpec up;
      ChainUpsample u;
      u.params.mode = uni(rng, 0, 1) ? UpsampleMode::Linear : UpsampleMode::Nearest;
      const bool by_size = uni(rng, 0, 1) == 1;
      for (std::int64_t d = 0; d < spatial; ++d) {
        const std::int64_t f = uni(rng, 1, spatial == 3 ? 2 : 3);
        auto& length = lengths[static_cast<std::size_t>(d)];
        if (by_size)
          u.params.size.push_back(length * f);
        else
          u.params.scale_factor.push_back(static_cast<double>(f));
        length *= f;
      }
      up.upsample = u;
      c.layers.push_back(up);
      c.upsamples = true;
    }
    LayerSpec conv;
    conv.conv = true;
    const std::int64_t out = uni(rng, 1, 4);
    Shape w{out, channels};
    conv.params.stride.assign(static_cast<std::size_t>(spatial), 1);
    conv.params.padding.clear();
    conv.params.dilation.clear();
    for (std::int64_t d = 0; d < spatial; ++d) {
      const std::int64_t kernel = uni(rng, 1, 4), dilation = uni(rng, 1, 2);
      const std::int64_t extent = dilation * (kernel - 1) + 1;
      const std::int64_t left = uni(rng, 0, extent - 1);
      w.push_back(kernel);
      conv.params.dilation.push_back(dilation);
      conv.params.padding.emplace_back(left, extent - 1 - left);
    }
    conv.params.padding_mode = family < 2    ? PaddingMode::Zeros
                               : family == 2 ? mixed[uni(rng, 0, 2)]
                                             : PaddingMode::Circular;
    // What the layer alone accepts: reflect shorter than the dim, circular
    // at most as long (else replicate, and zeros for the whole chain).
    for (std::int64_t d = 0; d < spatial; ++d) {
      const auto [left, right] = conv.params.padding[static_cast<std::size_t>(d)];
      const std::int64_t length = c.shape[static_cast<std::size_t>(d) + 2];
      if (conv.params.padding_mode == PaddingMode::Reflect && std::max(left, right) >= length)
        conv.params.padding_mode = PaddingMode::Replicate;
      if (conv.params.padding_mode == PaddingMode::Circular && std::max(left, right) > length)
        c.ring_too_wide = true;
    }
    // Zero padding throughout: a quarter of the convolutions resample.
    std::vector<std::int64_t> extents;
    for (std::int64_t d = 0; d < spatial; ++d)
      extents.push_back(conv.params.dilation[static_cast<std::size_t>(d)] * (w[d + 2] - 1) + 1);
    if (family < 2 && !upsampling && uni(rng, 0, 3) == 0) {
      std::vector<std::int64_t> caps;
      for (const std::int64_t e : extents)
        caps.push_back(e - 1);
      resample(rng, conv.params.stride, conv.params.padding, extents, caps, lengths);
      c.resamples = true;
    }
    conv.weight = Tensor::rand(w, DType::F64, ++draw);
    if (uni(rng, 0, 1)) conv.bias = Tensor::rand({out}, DType::F64, ++draw);
    c.layers.push_back(conv);
    channels = out;
    if (uni(rng, 0, 3) == 0) c.layers.push_back(random_activation(rng));
    // Pools pad their own way: not in a ring.
    if (family < 3 && uni(rng, 0, 2) == 0) {
      LayerSpec pool = random_pool(rng, spatial);
      PoolParams& p = pool.pool->params;
      std::vector<std::int64_t> extents;
      for (std::size_t d = 0; d < p.kernel.size(); ++d)
        extents.push_back(p.dilation[d] * (p.kernel[d] - 1) + 1);
      if (family < 2 && !upsampling && uni(rng, 0, 2) == 0) {  // a strided or shrinking pool
        std::vector<std::int64_t> caps;                        // PyTorch: within half the kernel
        for (const std::int64_t k : p.kernel)
          caps.push_back(k / 2);
        resample(rng, p.stride, p.padding, extents, caps, lengths);
        c.resamples = true;
      }
      c.layers.push_back(pool);
    }
    if (uni(rng, 0, 3) > 0) {
      LayerSpec norm;
      std::vector<std::int64_t> divisors;
      for (std::int64_t g = 1; g <= channels; ++g)
        if (channels % g == 0) divisors.push_back(g);
      norm.groups = divisors[static_cast<std::size_t>(
          uni(rng, 0, static_cast<std::int64_t>(divisors.size()) - 1))];
      norm.relu = uni(rng, 0, 1) == 1;
      norm.batch = uni(rng, 0, 2) == 0;
      if (norm.batch) {  // in training (with or without running statistics) or eval mode
        // F.batch_norm in training needs more than one value per channel.
        norm.training = uni(rng, 0, 2) > 0 && c.shape[0] * shape_numel(lengths) > 1;
        if (!norm.training || uni(rng, 0, 1)) {
          norm.running_mean = Tensor::rand({channels}, DType::F64, ++draw);
          norm.running_var = Tensor::rand({channels}, DType::F64, ++draw);
          norm.running_var.add_(Tensor::full({channels}, 0.5, DType::F64));  // away from 0
        }
      }
      if (uni(rng, 0, 2) > 0) {
        norm.weight = Tensor::rand({channels}, DType::F64, ++draw);
        norm.bias = Tensor::rand({channels}, DType::F64, ++draw);
      }
      c.layers.push_back(norm);
      if (uni(rng, 0, 3) == 0) c.layers.push_back(random_activation(rng));
    }
  }
  if (c.ring_too_wide)
    for (auto& l : c.layers)
      l.params.padding_mode = PaddingMode::Zeros;
  c.input_grad = uni(rng, 0, 3) > 0;
  c.what = fmt::format("input {}{} placements", shape_str(c.shape),
                       c.input_grad ? "" : " (no gradient)");
  for (const auto& p : c.placements)
    c.what += " " + p.str();
  for (const auto& l : c.layers)
    c.what += l.transposed ? fmt::format(" | conv_transpose w{} {}", shape_str(l.weight.shape()),
                                         l.transposed->str())
              : l.upsample ? fmt::format(" | upsample {}", l.upsample->params.str())
              : l.pool     ? fmt::format(" | {} {}", l.pool->average ? "avg_pool" : "max_pool",
                                         l.pool->params.str())
              : l.activation
                  ? fmt::format(" | {} {} {}", l.activation->op, l.activation->negative_slope,
                                gelu_approximate_name(l.activation->approximate))
              : l.conv  ? fmt::format(" | conv w{} {}", shape_str(l.weight.shape()), l.params.str())
              : l.batch ? fmt::format(" | batch_norm{}{}{}{}", l.training ? "" : " eval",
                                      l.running_mean.defined() ? " running" : "",
                                      l.relu ? " relu" : "", l.weight.defined() ? " affine" : "")
                        : fmt::format(" | group_norm {}{}{}", l.groups, l.relu ? " relu" : "",
                                      l.weight.defined() ? " affine" : "");
  return c;
}

// The forward output and every gradient (input first, then each parameter
// in order), then the batch norms' updated running statistics, as whole
// tensors.
std::vector<Tensor> run(const Case& c, const DeviceMesh& mesh, bool fused, std::uint64_t seed,
                        DType dtype) {
  const Placements replicated(static_cast<std::size_t>(mesh.ndim()), Replicate());
  DTensor x =
      distribute_tensor(Tensor::rand(c.shape, DType::F64, seed).to(dtype), mesh, c.placements);
  x.requires_grad_(c.input_grad);
  std::vector<DTensor> params;
  auto leaf = [&](const Tensor& t) -> std::optional<DTensor> {
    if (!t.defined()) return std::nullopt;
    DTensor p = distribute_tensor(t.to(dtype), mesh, replicated);
    p.requires_grad_();
    params.push_back(p);
    return p;
  };
  auto state = [&](const Tensor& t) -> std::optional<DTensor> {  // no gradient
    if (!t.defined()) return std::nullopt;
    return distribute_tensor(t.to(dtype), mesh, replicated);
  };
  std::vector<ChainLayer> chain;
  for (const auto& l : c.layers) {
    if (l.activation) {
      chain.emplace_back(*l.activation);
    } else if (l.upsample) {
      chain.emplace_back(*l.upsample);
    } else if (l.transposed) {
      const auto w = leaf(l.weight);
      chain.emplace_back(ChainConvTranspose{*w, leaf(l.bias), *l.transposed});
    } else if (l.pool) {
      chain.emplace_back(*l.pool);
    } else if (l.conv) {
      const auto w = leaf(l.weight);
      chain.emplace_back(ChainConv{*w, leaf(l.bias), l.params});
    } else if (l.batch) {
      const auto w = leaf(l.weight);
      chain.emplace_back(ChainBatchNorm{state(l.running_mean), state(l.running_var), w,
                                        leaf(l.bias), l.training, 0.3, 1e-5, l.relu});
    } else {
      const auto w = leaf(l.weight);
      chain.emplace_back(ChainGroupNorm{l.groups, 1e-5, w, leaf(l.bias), l.relu});
    }
  }
  DTensor y = x;
  std::vector<DTensor> running;  // the updated running statistics, in order
  if (fused) {
    // A padding mode the one exchange cannot serve: none (the caller checks
    // why).
    if (halo_chain_refusal(x, chain)) return {};
    HaloChainResult r = halo_chain_updating(x, chain);
    y = r.output;
    for (const auto& [mean, var] : r.running_stats) {
      running.push_back(mean);
      running.push_back(var);
    }
  } else {
    for (const auto& layer : chain) {
      if (const auto* conv = std::get_if<ChainConv>(&layer)) {
        y = convolution(y, conv->weight, conv->bias, conv->params);
      } else if (const auto* pool = std::get_if<ChainPool>(&layer)) {
        y = pool->average ? avg_pool(y, pool->params) : max_pool(y, pool->params);
      } else if (const auto* u = std::get_if<ChainUpsample>(&layer)) {
        y = upsample(y, u->params);
      } else if (const auto* t = std::get_if<ChainConvTranspose>(&layer)) {
        y = conv_transpose(y, t->weight, t->bias, t->params);
      } else if (const auto* a = std::get_if<ChainActivation>(&layer)) {
        y = a->op == "relu"         ? relu(y)
            : a->op == "leaky_relu" ? leaky_relu(y, a->negative_slope)
            : a->op == "gelu"       ? gelu(y, a->approximate)
            : a->op == "silu"       ? silu(y)
            : a->op == "sigmoid"    ? sigmoid(y)
                                    : tanh(y);
      } else if (const auto* b = std::get_if<ChainBatchNorm>(&layer)) {
        const BatchNormResult r = batch_norm(y, b->weight, b->bias, b->running_mean, b->running_var,
                                             b->training, b->momentum, b->eps);
        y = b->relu ? relu(r.output) : r.output;
        if (b->updates_running_stats()) {
          running.push_back(*r.running_mean);
          running.push_back(*r.running_var);
        }
      } else {
        const auto& n = std::get<ChainGroupNorm>(layer);
        y = group_norm(y, n.num_groups, n.weight, n.bias, n.eps,
                       n.relu ? NormActivation::ReLU : NormActivation::None);
      }
    }
  }
  const DTensor gy = distribute_tensor(Tensor::rand(y.shape(), DType::F64, seed + 1).to(dtype),
                                       mesh, y.placements());
  backward(y, gy);
  REQUIRE(x.grad().has_value() == c.input_grad);
  std::vector<Tensor> out{
      y.full_tensor().to(DType::F64),
      c.input_grad ? x.grad()->full_tensor().to(DType::F64) : Tensor::zeros(c.shape, DType::F64)};
  for (const auto& p : params)
    out.push_back(p.grad()->full_tensor().to(DType::F64));
  for (const auto& r : running)
    out.push_back(r.full_tensor().to(DType::F64));
  return out;
}

// Relative to the larger of the reference's largest value and 1: a gradient
// that is zero analytically (a norm's weight before another norm over the
// same group) comes out as rounding noise either way.
double max_relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const Tensor x = a.contiguous(), y = b.contiguous();
  double scale = 1, err = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    scale = std::max(scale, std::abs(y.data<double>()[i]));
    err = std::max(err, std::abs(x.data<double>()[i] - y.data<double>()[i]));
  }
  return err / scale;
}

void run_cases(const DeviceMesh& mesh, int cases, std::uint64_t seed, DType dtype = DType::F64,
               double tolerance = 1e-12) {
  std::mt19937_64 rng(seed);
  int refused = 0, fused_with_modes = 0, fused_with_pools = 0, fused_with_batch_norms = 0,
      fused_resampling = 0, fused_upsampling = 0, fused_transposed = 0;
  for (int k = 0; k < cases; ++k) {
    const Case c = random_case(rng, mesh, 100 * seed + static_cast<std::uint64_t>(k) * 10);
    INFO(fmt::format("case {}: {}", k, c.what));
    const std::uint64_t data_seed = 7 * seed + static_cast<std::uint64_t>(k);
    const auto unfused = run(c, mesh, false, data_seed, dtype);
    const auto fused = run(c, mesh, true, data_seed, dtype);
    const bool modes = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) {
      return l.conv && l.params.padding_mode != PaddingMode::Zeros;
    });
    if (fused.empty()) {  // refused: only for what its padding modes or strides need
      CHECK((modes || c.resamples));
      ++refused;
      continue;
    }
    fused_resampling += c.resamples;
    fused_upsampling += c.upsamples;
    fused_transposed += std::any_of(c.layers.begin(), c.layers.end(),
                                    [](const LayerSpec& l) { return l.transposed.has_value(); });
    fused_with_modes += modes;
    fused_with_pools += std::any_of(c.layers.begin(), c.layers.end(),
                                    [](const LayerSpec& l) { return l.pool.has_value(); });
    fused_with_batch_norms +=
        std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.batch; });
    REQUIRE(fused.size() == unfused.size());
    // The same layers on one process (the input replicated), run only where
    // the two differ by more than the tolerance: a gradient that is zero
    // analytically (a convolution's weight before a norm of one channel per
    // group) comes out as rounding noise of the large intermediates, and
    // the unfused run's own distance from the one-process result says how
    // large that noise is. A wrong row or fold is of the order of 1.
    std::vector<Tensor> one_process;
    for (std::size_t i = 0; i < fused.size(); ++i) {
      const double error = max_relative_error(fused[i], unfused[i]);
      double noise = 0;
      if (error > tolerance) {
        if (one_process.empty()) {
          Case alone = c;
          alone.placements.assign(alone.placements.size(), Replicate());
          one_process = run(alone, mesh, false, data_seed, dtype);
        }
        noise = max_relative_error(unfused[i], one_process[i]);
      }
      INFO(fmt::format(
          "result {} (0: output, 1: input's gradient, then the parameters', then the running "
          "statistics): {:.3e} (the "
          "unfused run's rounding: {:.3e})",
          i, error, noise));
      CHECK(error <= tolerance + 2 * noise);
    }
  }
  // The draw reaches chains with padding modes, and most of them fuse.
  INFO(fmt::format(
      "{} chains with padding modes fused, {} refused, {} with pools, {} with batch norms, {} "
      "resampling and {} upsampling ({} with a transposed convolution) fused",
      fused_with_modes, refused, fused_with_pools, fused_with_batch_norms, fused_resampling,
      fused_upsampling, fused_transposed));
  CHECK(fused_with_modes >= cases / 5);
  CHECK(fused_with_pools >= cases / 4);
  CHECK(fused_with_batch_norms >= cases / 4);
  CHECK(fused_resampling >= cases / 10);
  CHECK(fused_upsampling >= cases / 15);
  CHECK(fused_transposed >= cases / 30);
  CHECK(refused <= fused_with_modes + fused_resampling);
}

// Counts the calls of "halo_chain" while alive.
class ChainCounter {
 public:
  ChainCounter() {
    HandlerOptions options;
    auto builtin = *current_handler("halo_chain", &options);
    register_op_handler(
        "halo_chain",
        [this, builtin](OpCall& call) {
          ++count;
          arguments.push_back(call.schema().size());
          return builtin(call);
        },
        true, options);
    builtin_ = builtin;
    options_ = options;
  }
  ~ChainCounter() { register_op_handler("halo_chain", builtin_, true, options_); }
  int count = 0;
  std::vector<std::size_t> arguments;  // each chain's: its layers and their kinds, by size

 private:
  OpHandler builtin_;
  HandlerOptions options_;
};

}  // namespace

TEST_CASE("halo_chain equals its layers one by one, forward and every gradient, P = 2 and 3",
          "[window][halo_chain][mp]") {
  for (int P : {2, 3})
    run_ranks(P, [P](RankContext&) {
      run_cases(init_device_mesh(DeviceType::CPU, {P}), 80, 11 + static_cast<std::uint64_t>(P));
    });
}

TEST_CASE("halo_chain in f32 (oneDNN's kernels, padded copies) equals its layers one by one",
          "[window][halo_chain][mp]") {
  // The two runs sum in different orders (the statistics over owned cells,
  // the kernels' blocking over other windows): up to ~1e-4 of the largest
  // value after three norms. A wrong row or fold is of the order of 1.
  run_ranks(2, [](RankContext&) {
    run_cases(init_device_mesh(DeviceType::CPU, {2}), 60, 21, DType::F32, 1e-3);
  });
}

TEST_CASE("halo_chain on a 2x2 mesh: two spatial dims, or batch and space, sharded",
          "[window][halo_chain][mp]") {
  run_ranks(4, [](RankContext&) { run_cases(init_device_mesh(DeviceType::CPU, {2, 2}), 80, 5); });
}

TEST_CASE(
    "halo_chain ending in a transposed convolution that changes the channels equals its layers",
    "[window][halo_chain][mp]") {
  // (The random chains put a convolution after every transposed one: the
  // chain's output then has the last convolution's channels either way.)
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    Case c;
    c.shape = {2, 2, 9, 6};
    c.placements = {Shard(2)};
    LayerSpec conv;
    conv.conv = true;
    conv.params.padding = {{1, 1}};
    conv.weight = Tensor::rand({4, 2, 3, 3}, DType::F64, 31);
    LayerSpec up;
    ConvTransposeParams p;
    p.stride = {2};
    p.padding = {1};
    p.output_padding = {1};
    p.groups = 2;
    up.transposed = p;
    up.weight = Tensor::rand({4, 3, 3, 3}, DType::F64, 32);  // 4 -> 6 channels
    up.bias = Tensor::rand({6}, DType::F64, 33);
    LayerSpec relu;
    relu.activation = ChainActivation{"relu"};
    c.layers = {conv, relu, up};
    const auto fused = run(c, mesh, true, 34, DType::F64);
    const auto unfused = run(c, mesh, false, 34, DType::F64);
    REQUIRE(fused.size() == unfused.size());
    REQUIRE(fused[0].shape() == Shape{2, 6, 18, 12});
    for (std::size_t i = 0; i < fused.size(); ++i)
      CHECK(max_relative_error(fused[i], unfused[i]) <= 1e-12);
  });
}

TEST_CASE("halo_chain refuses what it cannot fuse, naming why, on every rank, and its cost model",
          "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    const Placements R{Replicate()};
    const DTensor x =
        distribute_tensor(Tensor::rand({1, 2, 8, 8}, DType::F64, 1), mesh, {Shard(2)});
    const DTensor w = distribute_tensor(Tensor::rand({2, 2, 3, 3}, DType::F64, 2), mesh, R);
    ConvParams same;
    same.padding = {{1, 1}};
    ConvParams strided = same;
    strided.stride = {2};
    ChainConv a{w, std::nullopt, same}, s{w, std::nullopt, strided};
    CHECK_FALSE(halo_chain_refusal(x, {a, a}));
    CHECK(halo_chain_refusal(x, {a}).value_or("").find("fewer than two") != std::string::npos);
    // Strides and padding that is not "same" resample the chain: fused, with
    // zero padding only; a norm's statistics need every cell computed.
    CHECK_FALSE(halo_chain_refusal(x, {a, s}));
    ConvParams valid;
    valid.padding = {{0, 0}};
    CHECK_FALSE(halo_chain_refusal(x, {a, ChainConv{w, std::nullopt, valid}, a}));
    {
      ConvParams reflected = strided;
      reflected.padding_mode = PaddingMode::Reflect;
      CHECK(halo_chain_refusal(x, {a, ChainConv{w, std::nullopt, reflected}})
                .value_or("")
                .find("pads with zeros only") != std::string::npos);
      ConvParams sampling;  // k = 1, stride 2: every other row is read by none
      sampling.stride = {2};
      const DTensor w1x1 = distribute_tensor(Tensor::rand({2, 2, 1, 1}, DType::F64, 2), mesh, R);
      const ChainConv subsample{w1x1, std::nullopt, sampling};
      CHECK_FALSE(halo_chain_refusal(x, {a, subsample}));
      ConvParams padded = sampling;  // a 1x1 window padded by 1: outputs of padding only
      padded.stride = {1};
      padded.padding = {{1, 0}};
      CHECK(halo_chain_refusal(x, {a, ChainConv{w1x1, std::nullopt, padded}})
                .value_or("")
                .find("as wide as its window") != std::string::npos);
      CHECK(halo_chain_refusal(x, {a, ChainGroupNorm{}, subsample})
                .value_or("")
                .find("reads none of") != std::string::npos);
      CHECK_FALSE(halo_chain_refusal(x, {a, subsample, ChainGroupNorm{}, a}));
      ConvParams huge;  // a 3x3 window over 8 rows, stride 8: one output, then none
      huge.stride = {8};
      CHECK(halo_chain_refusal(x,
                               {ChainConv{w, std::nullopt, huge}, ChainConv{w, std::nullopt, huge}})
                .value_or("")
                .find("output is empty") != std::string::npos);
    }
    CHECK(halo_chain_refusal(distribute_tensor(x.full_tensor(), mesh, R), {a, a})
              .value_or("")
              .find("no spatial dim") != std::string::npos);
    // The input's rules alone: the same reason, whatever the layers.
    CHECK(halo_chain_input_refusal(distribute_tensor(x.full_tensor(), mesh, R))
              .value_or("")
              .find("no spatial dim") != std::string::npos);
    CHECK_FALSE(halo_chain_input_refusal(x));
    // Padding modes: reflect, replicate and a ring fuse; circular mixed with
    // another mode does not, nor a ring whose halo wraps twice, nor a
    // lopsided reflect whose rows the edge rank does not hold.
    auto moded = [&](const DTensor& weight, ConvParams p, PaddingMode m) {
      p.padding_mode = m;
      return ChainConv{weight, std::nullopt, p};
    };
    const ChainConv reflect = moded(w, same, PaddingMode::Reflect),
                    circular = moded(w, same, PaddingMode::Circular);
    CHECK_FALSE(halo_chain_refusal(x, {reflect, moded(w, same, PaddingMode::Replicate), a}));
    CHECK_FALSE(halo_chain_refusal(x, {circular, circular}));
    CHECK(halo_chain_refusal(x, {circular, a}).value_or("").find("mixes circular") !=
          std::string::npos);
    CHECK_FALSE(halo_chain_refusal(x, {a, ChainActivation{"silu"}, a}));
    CHECK(halo_chain_refusal(x, {a, ChainActivation{"softplus"}, a})
              .value_or("")
              .find("activation is not") != std::string::npos);
    // Pools: stride 1 and "same" only, PyTorch's rules, never in a ring; a
    // convolution and a pool are two window layers.
    auto pool = [](bool average, std::vector<std::int64_t> kernel, ConvParams::Padding padding,
                   std::vector<std::int64_t> stride = {1}) {
      ChainPool out{average, {}};
      out.params.kernel = std::move(kernel);
      out.params.padding = std::move(padding);
      out.params.stride = std::move(stride);
      return out;
    };
    const ChainPool max3 = pool(false, {3}, {{1, 1}});
    CHECK_FALSE(halo_chain_refusal(x, {a, max3}));
    CHECK_FALSE(halo_chain_refusal(x, {a, ChainActivation{"relu"}, pool(true, {2}, {{1, 0}}), a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, pool(false, {2}, {{0, 0}}, {2}), a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, pool(false, {3}, {{0, 0}})}));
    ChainPool ceil = pool(false, {2}, {{0, 0}}, {2});
    ceil.params.ceil_mode = true;
    CHECK(halo_chain_refusal(x, {a, ceil}).value_or("").find("ceil_mode") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, pool(true, {3}, {{2, 0}})})
              .value_or("")
              .find("pool's parameters") != std::string::npos);
    CHECK(
        halo_chain_refusal(x, {circular, max3}).value_or("").find("pool in a chain of circular") !=
        std::string::npos);
    CHECK(halo_chain_refusal(x, {max3, a}).value_or("").find("start with a convolution") !=
          std::string::npos);
    // Upsamples: nearest, or linear without align_corners, by whole
    // factors whose taps their footprint holds; never with a stride.
    auto upsampled = [](UpsampleMode mode, std::vector<double> scale,
                        std::vector<std::int64_t> size, bool align_corners = false) {
      ChainUpsample u;
      u.params.mode = mode;
      u.params.scale_factor = std::move(scale);
      u.params.size = std::move(size);
      u.params.align_corners = align_corners;
      return u;
    };
    const ChainUpsample twice = upsampled(UpsampleMode::Nearest, {2.0}, {});
    CHECK_FALSE(halo_chain_refusal(x, {a, twice, a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Linear, {}, {24, 8}), a}));
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Linear, {2.0}, {}, true), a})
              .value_or("")
              .find("aligns corners") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Nearest, {2.5}, {}), a})
              .value_or("")
              .find("no whole multiple") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Nearest, {2.0000001}, {}), a})
              .value_or("")
              .find("as no whole factor does") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Nearest, {}, {8, 8, 8}), a})
              .value_or("")
              .find("size or scale_factor") != std::string::npos);
    ConvParams halving = same;
    halving.stride = {2};
    CHECK(halo_chain_refusal(x, {ChainConv{w, std::nullopt, halving}, twice, a})
              .value_or("")
              .find("upsample has a strided layer") != std::string::npos);
    CHECK(halo_chain_refusal(x, {reflect, twice, a}).value_or("").find("pads with zeros only") !=
          std::string::npos);
    CHECK(halo_chain_refusal(x, {twice, a}).value_or("").find("start with a convolution") !=
          std::string::npos);
    CHECK(halo_chain_saving(x, {a, max3}) > 0);
    CHECK(halo_chain_saving(x, {a, twice, a}) > 0);
    // Transposed convolutions: at least as wide as their stride, with
    // output_padding at most their padding.
    auto transposed = [&](std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                          std::int64_t output_padding) {
      ConvTransposeParams p;
      p.stride = {stride};
      p.padding = {padding};
      p.output_padding = {output_padding};
      return ChainConvTranspose{
          distribute_tensor(Tensor::rand({2, 2, kernel, kernel}, DType::F64, 6), mesh, R),
          std::nullopt, p};
    };
    CHECK_FALSE(halo_chain_refusal(x, {a, transposed(3, 2, 1, 1), a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, transposed(2, 2, 0, 0), a}));
    CHECK(halo_chain_refusal(x, {a, transposed(1, 2, 0, 0), a})
              .value_or("")
              .find("narrower than its stride") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, transposed(3, 2, 0, 1), a})
              .value_or("")
              .find("output_padding exceeds its padding") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, transposed(3, 2, 1, 2), a})
              .value_or("")
              .find("does not fit its input") != std::string::npos);
    CHECK(halo_chain_saving(x, {a, transposed(3, 2, 1, 1), a}) > 0);
    // Batch norms: running statistics both or neither, given in eval mode,
    // [C] and replicated; in training more than one value per channel.
    const DTensor stat = distribute_tensor(Tensor::rand({2}, DType::F64, 5), mesh, R);
    const DTensor stat3 = distribute_tensor(Tensor::rand({3}, DType::F64, 5), mesh, R);
    auto refused_for = [&](const DTensor& in, const ChainBatchNorm& b) {
      return halo_chain_refusal(in, {a, b, a}).value_or("");
    };
    CHECK(refused_for(x, {}).empty());
    CHECK(refused_for(x, {stat, stat, stat, stat, false}).empty());
    CHECK(refused_for(x, {stat, std::nullopt}).find("go together") != std::string::npos);
    CHECK(refused_for(x, {std::nullopt, std::nullopt, stat, stat, false})
              .find("eval mode has no running") != std::string::npos);
    CHECK(refused_for(x, {stat3, stat3}).find("running statistics are not [C]") !=
          std::string::npos);
    CHECK(refused_for(x, {std::nullopt, std::nullopt, stat3}).find("weight, bias") !=
          std::string::npos);
    CHECK(refused_for(x, {stat, stat, stat, stat, true, 0.1, -1.0}).find("eps is negative") !=
          std::string::npos);
    const DTensor single =
        distribute_tensor(Tensor::rand({1, 2, 1, 1}, DType::F64, 1), mesh, {Shard(2)});
    CHECK(refused_for(single, {}).find("one value per channel") != std::string::npos);
    CHECK(refused_for(single, {stat, stat, std::nullopt, std::nullopt, false}).empty());
    const DTensor w7 = distribute_tensor(Tensor::rand({2, 2, 7, 7}, DType::F64, 4), mesh, R);
    ConvParams same7;
    same7.padding = {{3, 3}};
    const ChainConv circular7 = moded(w7, same7, PaddingMode::Circular);
    CHECK(halo_chain_refusal(x, {circular7, circular7, circular7})
              .value_or("")
              .find("more than once") != std::string::npos);
    const DTensor narrow =
        distribute_tensor(Tensor::rand({1, 2, 3, 8}, DType::F64, 1), mesh, {Shard(2)});
    ConvParams lopsided;  // reads rows 1..2 at the top edge; the top rank holds 2 and 1 more
    lopsided.padding = {{2, 0}, {1, 1}};
    CHECK(halo_chain_refusal(narrow, {a, moded(w, lopsided, PaddingMode::Reflect)})
              .value_or("")
              .find("edge rank does not hold") != std::string::npos);
    {
      // f32 convolutions would run in bf16, each on its own; f64 is never lowered.
      AutocastScope autocast;
      const DTensor x32 = distribute_tensor(x.full_tensor().to(DType::F32), mesh, {Shard(2)});
      const DTensor w32 = distribute_tensor(w.full_tensor().to(DType::F32), mesh, R);
      ChainConv a32{w32, std::nullopt, same};
      CHECK(halo_chain_refusal(x32, {a32, a32}).value_or("").find("autocast") != std::string::npos);
      CHECK_FALSE(halo_chain_refusal(x, {a, a}));
    }
    // The cost model: a small chain pays, more so over a slower link; 256
    // channels recompute more than the messages they save.
    const double saving = halo_chain_saving(x, {a, a});
    CHECK(saving > 0);
    // One exchange or none either way: nothing saved.
    CHECK(halo_chain_saving(x, {a}) <= 0);
    CHECK(halo_chain_saving(x, {ChainActivation{"relu"}}) <= 0);
    // A reflect chain also pays for its padded copies.
    CHECK(halo_chain_saving(x, {reflect, reflect}) < saving);
    // Cut in two, the dim gives each rank one neighbour; the ring wraps, so
    // its ranks have one on each side: twice the messages saved.
    CHECK(halo_chain_saving(x, {circular, circular}) > saving);
    {
      // A send and a receive saved forward and backward, each 500 us more.
      ScopedConfig slow([](Config& c) { c.sim_link = Config::SimLink{500, std::nullopt}; });
      CHECK(halo_chain_saving(x, {a, a}) == Approx(saving + 2 * 2 * 500e-6));
    }
    const DTensor wide =
        distribute_tensor(Tensor::zeros({1, 256, 8, 64}, DType::F64), mesh, {Shard(2)});
    const DTensor w256 = distribute_tensor(Tensor::zeros({256, 256, 3, 3}, DType::F64), mesh, R);
    ChainConv big{w256, std::nullopt, same};
    CHECK_FALSE(halo_chain_refusal(wide, {big, big}));
    CHECK(halo_chain_saving(wide, {big, big}) < 0);
    CHECK_FALSE(halo_chain_pays(wide, {big, big}));
    // The trainer's DoubleConv blocks (3x3, f32; norms cost nothing here)
    // through shared memory, as docs/halo.md prices them: an exchange's own
    // cost saved pays for the encoders' recomputed row at both sizes and for
    // the decoder's (32 channels in) at 2x8x128x128, not at 2x8x256x256.
    {
      const auto weight = [&](std::int64_t out, std::int64_t in) {
        return ChainConv{distribute_tensor(Tensor::zeros({out, in, 3, 3}, DType::F32), mesh, R),
                         std::nullopt, same};
      };
      const auto input = [&](std::int64_t c, std::int64_t hw) {
        return distribute_tensor(Tensor::zeros({2, c, hw, hw}, DType::F32), mesh, {Shard(2)});
      };
      const std::vector<ChainLayer> encoder{weight(16, 8), weight(16, 16)};
      const std::vector<ChainLayer> decoder{weight(16, 32), weight(16, 16)};
      CHECK(halo_chain_saving(input(8, 128), encoder) > 0);
      CHECK(halo_chain_saving(input(8, 256), encoder) > 0);
      CHECK(halo_chain_saving(input(32, 128), decoder) > 0);
      // Over TCP (a message 40 us) the decoder fuses at 256^2 too.
      if (mesh.get_mesh_group()->message_seconds() <= 5e-6)
        CHECK(halo_chain_saving(input(32, 256), decoder) < 0);
    }
    // Every rank prices a chain alike, uneven shards too (9 rows: 5 and
    // 4), so that all fuse or none does: the cost is the largest shard's.
    {
      const DTensor uneven =
          distribute_tensor(Tensor::rand({1, 2, 9, 8}, DType::F64, 4), mesh, {Shard(2)});
      Tensor mine = Tensor::full({1}, halo_chain_saving(uneven, {reflect, reflect}), DType::F64);
      Tensor low = mine.clone(), high = mine.clone();
      const auto group = mesh.get_mesh_group();
      group->allreduce(low, ReduceOp::Min);
      group->allreduce(high, ReduceOp::Max);
      CHECK(low.data<double>()[0] == high.data<double>()[0]);
    }
    // Called directly, a call whose lists do not fit is refused by name.
    const DTensor w1 = distribute_tensor(Tensor::rand({2, 2, 3}, DType::F64, 3), mesh, R);
    CHECK_THROWS_WITH(dispatch("halo_chain", {x, std::string("conv"), w1, None{}, IntList{1, 1},
                                              IntList{1}, std::int64_t{1}, IntList{1}}),
                      Catch::Contains("halo_chain") && Catch::Contains("spatial dims"));
    // A layer of another kind, a field of the wrong type, a layer cut short:
    // each is named.
    CHECK_THROWS_WITH(
        dispatch("halo_chain", {x, std::string("pool"), w, None{}, IntList{1, 1, 1, 1},
                                IntList{1, 1}, std::int64_t{1}}),
        Catch::Contains("halo_chain") && Catch::Contains("unknown layer kind 'pool'"));
    CHECK_THROWS_WITH(
        dispatch("halo_chain",
                 {x, std::string("conv"), w, None{}, IntList{1, 1, 1, 1}, IntList{1, 1}, 1.5}),
        Catch::Contains("a convolution's groups") && Catch::Contains("must be an int"));
    CHECK_THROWS_WITH(dispatch("halo_chain", {x, std::string("conv"), w, None{}}),
                      Catch::Contains("a convolution's padding") && Catch::Contains("missing"));
    ConvParams reflected = strided;
    reflected.padding_mode = PaddingMode::Reflect;
    CHECK_THROWS_WITH(halo_chain(x, {a, ChainConv{w, std::nullopt, reflected}}),
                      Catch::Contains("halo_chain") && Catch::Contains("zeros only"));
    // Running statistics updated in training come back from
    // halo_chain_updating only; halo_chain() would drop them.
    const ChainBatchNorm updating{stat, stat};
    CHECK_THROWS_WITH(halo_chain(x, {a, updating, a}),
                      Catch::Contains("layer 1") && Catch::Contains("halo_chain_updating"));
    CHECK(halo_chain_updating(x, {a, updating, a}).running_stats.size() == 1);
    CHECK_NOTHROW(halo_chain(x, {a, ChainBatchNorm{}, a}));
  });
}

TEST_CASE(
    "nn::Sequential runs a conv / group norm / relu chain as one exchange where it pays, and "
    "layer by layer with DTENSOR_HALO_FUSION=off, with the same result",
    "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    nn::manual_seed(3);
    nn::ConvOptions o;
    o.padding = {1};
    o.dtype = DType::F64;
    auto seq = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o),
        std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(4, 4, 3, o),
        std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
        std::make_shared<nn::ReLU>()});
    seq->distribute(mesh);
    const Tensor input = Tensor::rand({2, 2, 16, 16}, DType::F64, 4);
    // One forward and backward of `net` on `input` sharded as `placement`:
    // the output, the input's gradient, every parameter's.
    auto step = [&](nn::Module& net, const Placement& placement, std::uint64_t seed) {
      for (auto& p : net.parameters())
        p->set_grad(std::nullopt);
      DTensor x = distribute_tensor(input, mesh, {placement});
      x.requires_grad_();
      const DTensor y = net(x);
      backward(y,
               distribute_tensor(Tensor::rand(y.shape(), DType::F64, seed), mesh, y.placements()));
      std::vector<Tensor> out{y.full_tensor(), x.grad()->full_tensor()};
      for (auto& p : net.parameters())
        out.push_back(p->grad()->full_tensor());
      return out;
    };
    std::vector<Tensor> fused, unfused;
    {
      ChainCounter counter;
      fused = step(*seq, Shard(2), 5);
      CHECK(counter.count == 1);
    }
    {
      ScopedConfig off([](Config& c) { c.halo_fusion = false; });
      ChainCounter counter;
      unfused = step(*seq, Shard(2), 5);
      CHECK(counter.count == 0);
    }
    for (std::size_t i = 0; i < fused.size(); ++i)
      CHECK(max_relative_error(fused[i], unfused[i]) <= 1e-12);
    // `net` with fusion on (`chains` chains run) and off (none): equal.
    auto fused_equals_unfused = [&](nn::Module& net, const Placement& placement, std::uint64_t seed,
                                    int chains) {
      std::vector<Tensor> runs[2];
      for (const bool fuse : {true, false}) {
        ScopedConfig knob([fuse](Config& c) { c.halo_fusion = fuse; });
        ChainCounter counter;
        runs[fuse ? 0 : 1] = step(net, placement, seed);
        CHECK(counter.count == (fuse ? chains : 0));
      }
      for (std::size_t i = 0; i < runs[0].size(); ++i)
        CHECK(max_relative_error(runs[0][i], runs[1][i]) <= 1e-12);
    };
    // InstanceNorm is a group norm with a group per channel.
    auto inorm = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 3, 3, o),
        std::make_shared<nn::InstanceNorm>(3, 1e-5, true, DType::F64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(3, 2, 3, o),
        std::make_shared<nn::InstanceNorm>(2, 1e-5, false, DType::F64)});
    inorm->distribute(mesh);
    fused_equals_unfused(*inorm, Shard(3), 6, 1);
    // Padding modes: reflect then replicate, and a circular ring.
    for (const auto& [first, second] : {std::pair{PaddingMode::Reflect, PaddingMode::Replicate},
                                        std::pair{PaddingMode::Circular, PaddingMode::Circular}}) {
      nn::ConvOptions a = o, b = o;
      a.padding_mode = first;
      b.padding_mode = second;
      auto moded = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, a),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 2, 3, b)});
      moded->distribute(mesh);
      fused_equals_unfused(*moded, Shard(2), 7, 1);
    }
    // Activations join as layers of their own.
    auto activated = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::SiLU>(),
        std::make_shared<nn::Conv2d>(4, 4, 3, o),
        std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
        std::make_shared<nn::GELU>(GeluApproximate::Tanh), std::make_shared<nn::Conv2d>(4, 2, 3, o),
        std::make_shared<nn::LeakyReLU>(0.2), std::make_shared<nn::Tanh>()});
    activated->distribute(mesh);
    fused_equals_unfused(*activated, Shard(2), 9, 1);
    // A Pad before a Conv that pads nothing joins the chain as that
    // convolution padded in the Pad's mode; unfused, the pad operator runs
    // and then a "valid" convolution. A constant padding of 1 joins nothing.
    nn::ConvOptions valid = o;
    valid.padding = {0};
    for (const auto& [mode, value, chains] :
         {std::tuple{PadMode::Reflect, 0.0, 1}, std::tuple{PadMode::Constant, 0.0, 1},
          std::tuple{PadMode::Constant, 1.0, 0}}) {
      auto padded = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Pad>(ConvParams::Padding{{1, 1}}, mode, value),
          std::make_shared<nn::Conv2d>(2, 4, 3, valid),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Pad>(ConvParams::Padding{{1, 1}, {2, 0}}, PadMode::Replicate),
          std::make_shared<nn::Conv2d>(4, 2, 3, valid)});
      padded->distribute(mesh);
      fused_equals_unfused(*padded, Shard(2), 8, chains);
    }
    // Pools join the chain, "same" ones and one that halves (the chain then
    // resamples).
    for (const bool halving : {false, true}) {
      PoolParams pooling;
      pooling.kernel = {halving ? 2 : 3};
      pooling.stride = {halving ? 2 : 1};
      pooling.padding = {{halving ? 0 : 1, halving ? 0 : 1}};
      auto pooled = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::MaxPool>(pooling),
          std::make_shared<nn::AvgPool>(PoolParams{{3}, {1}, {{1, 1}}}),
          std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      pooled->distribute(mesh);
      fused_equals_unfused(*pooled, Shard(2), 10, 1);
    }
    // An Upsample after a Conv joins the chain (a decoder's block: the
    // convolutions before and after it share one exchange), nearest by a
    // scale factor and linear by a size; one after a strided Conv does not
    // (strides and upsamples read as no one window): the run is cut before
    // it, and the Conv after it starts the second chain.
    for (const bool linear : {false, true}) {
      UpsampleParams up;
      up.mode = linear ? UpsampleMode::Linear : UpsampleMode::Nearest;
      if (linear)
        up.size = {32, 48};
      else
        up.scale_factor = {2.0};
      auto decoder = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Upsample>(up),
          std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      decoder->distribute(mesh);
      fused_equals_unfused(*decoder, Shard(2), 18, 1);
      fused_equals_unfused(*decoder, Shard(3), 19, 1);
    }
    // A ConvTranspose after a Conv joins it too: overlapping windows (k 3,
    // stride 2, padding 1, output_padding 1) and the U-Net's way up (k =
    // stride = 2, which exchanges nothing alone).
    for (const std::int64_t kernel : {3, 2}) {
      nn::ConvTransposeOptions t;
      t.stride = {2};
      t.padding = {kernel == 3 ? 1 : 0};
      t.output_padding = {kernel == 3 ? 1 : 0};
      t.dtype = DType::F64;
      auto decoder = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::ConvTranspose2d>(4, 3, kernel, t),
          std::make_shared<nn::Conv2d>(3, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      decoder->distribute(mesh);
      fused_equals_unfused(*decoder, Shard(2), 21, 1);
    }
    // An InstanceNorm after a ConvTranspose has a group per channel of the
    // transposed convolution's output (8 here, not the 4 of the Conv
    // before it, which would divide 8 and pass as a group norm).
    {
      nn::ConvTransposeOptions t;
      t.stride = {2};
      t.padding = {1};
      t.output_padding = {1};
      t.dtype = DType::F64;
      auto decoder = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::ConvTranspose2d>(4, 8, 3, t),
          std::make_shared<nn::InstanceNorm>(8, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(8, 2, 3, o)});
      decoder->distribute(mesh);
      fused_equals_unfused(*decoder, Shard(2), 22, 1);
    }
    {
      nn::ConvOptions halving = o;
      halving.stride = {2};
      UpsampleParams up;
      up.scale_factor = {2.0};
      auto strided = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::Conv2d>(4, 4, 3, halving),
          std::make_shared<nn::Upsample>(up), std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      strided->distribute(mesh);
      fused_equals_unfused(*strided, Shard(2), 20, 2);
    }
    // A run that cannot fuse whole (a group norm before a 1x1 convolution of
    // stride 2, which reads every other row only) fuses up to that
    // convolution, and from there on again (that 1x1 convolution exchanges
    // nothing alone: two 3x3 after it make the second chain pay).
    {
      nn::ConvOptions subsample = o;
      subsample.padding = std::vector<std::int64_t>{0};
      subsample.stride = {2};
      auto cut = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::Conv2d>(4, 4, 1, subsample),
          std::make_shared<nn::Conv2d>(4, 4, 3, o), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      cut->distribute(mesh);
      fused_equals_unfused(*cut, Shard(2), 15, 2);
    }
    // A run refused whole fuses its longest part that is not, and the rest
    // as a run of its own: zero-padded convolutions then circular ones (a
    // circular chain must be circular throughout), and a strided run whose
    // group norm comes before a 1x1 convolution of stride 2 (cut right
    // before that convolution, not at the first layer that resamples).
    {
      nn::ConvOptions ring = o;
      ring.padding_mode = PaddingMode::Circular;
      auto mixed = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::Conv2d>(4, 4, 3, ring),
          std::make_shared<nn::Conv2d>(4, 2, 3, ring)});
      mixed->distribute(mesh);
      fused_equals_unfused(*mixed, Shard(2), 16, 2);
      nn::ConvOptions halving = o;
      halving.stride = {2};
      nn::ConvOptions subsample = o;
      subsample.padding = std::vector<std::int64_t>{0};
      subsample.stride = {2};
      auto strided = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::Conv2d>(4, 4, 3, halving),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::Conv2d>(4, 4, 1, subsample),
          std::make_shared<nn::Conv2d>(4, 4, 3, o), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      strided->distribute(mesh);
      fused_equals_unfused(*strided, Shard(2), 17, 2);
    }
    // BatchNorms join the chain (a ReLU after one folds into it): two
    // networks alike, one fused, one not, trained two steps and then run in
    // eval mode; their outputs, gradients and buffers (the running
    // statistics, the batches counted) stay equal.
    {
      auto batch_normed = [&] {
        nn::manual_seed(11);
        auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(2, 4, 3, o),
            std::make_shared<nn::BatchNorm>(4, 1e-5, 0.3, true, true, DType::F64),
            std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 3, 3, o),
            std::make_shared<nn::BatchNorm>(3, 1e-5, 0.1, false, true, DType::F64),
            std::make_shared<nn::Conv2d>(3, 2, 3, o)});
        net->distribute(mesh);
        return net;
      };
      // The same BatchNorm twice: the second use updates from the first's
      // result, so the fused run ends before it.
      auto shared_twice = [&] {
        nn::manual_seed(13);
        auto bn = std::make_shared<nn::BatchNorm>(4, 1e-5, 0.5, true, true, DType::F64);
        auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(2, 4, 3, o), bn, std::make_shared<nn::Conv2d>(4, 4, 3, o),
            bn, std::make_shared<nn::Conv2d>(4, 4, 3, o)});
        net->distribute(mesh);
        return net;
      };
      {
        auto twice = std::array{shared_twice(), shared_twice()};
        std::vector<Tensor> runs[2];
        for (const bool fuse : {true, false}) {
          ScopedConfig knob([fuse](Config& c) { c.halo_fusion = fuse; });
          ChainCounter counter;
          runs[fuse ? 0 : 1] = step(*twice[fuse ? 0 : 1], Shard(2), 14);
          CHECK(counter.count == (fuse ? 1 : 0));  // conv bn conv, then bn and conv alone
          for (const auto& [name, t] : twice[fuse ? 0 : 1]->named_buffers())
            runs[fuse ? 0 : 1].push_back(t->full_tensor());
        }
        for (std::size_t i = 0; i < runs[0].size(); ++i) {
          INFO(fmt::format("a BatchNorm used twice, result {}", i));
          CHECK(max_relative_error(runs[0][i], runs[1][i]) <= 1e-12);
        }
      }
      auto nets = std::array{batch_normed(), batch_normed()};
      auto buffers = [](nn::Module& net) {
        std::vector<Tensor> out;
        for (const auto& [name, t] : net.named_buffers())
          out.push_back(t->full_tensor());
        return out;
      };
      for (const bool training : {true, true, false}) {
        std::vector<Tensor> runs[2];
        for (const bool fuse : {true, false}) {
          ScopedConfig knob([fuse](Config& c) { c.halo_fusion = fuse; });
          nn::Module& net = *nets[fuse ? 0 : 1];
          net.train(training);
          ChainCounter counter;
          runs[fuse ? 0 : 1] = step(net, Shard(2), 12);
          CHECK(counter.count == (fuse ? 1 : 0));
          for (const Tensor& b : buffers(net))
            runs[fuse ? 0 : 1].push_back(b);
        }
        REQUIRE(runs[0].size() == runs[1].size());
        CHECK(runs[0].size() == 2 + 8 + 6);  // output, input, 8 parameters, 2 x 3 buffers
        for (std::size_t i = 0; i < runs[0].size(); ++i) {
          INFO(fmt::format("training {}, result {}", training, i));
          CHECK(max_relative_error(runs[0][i], runs[1][i]) <= 1e-12);
        }
      }
    }
    // Replicated input: nothing to fuse, the layers run one by one.
    ChainCounter counter;
    const DTensor r = distribute_tensor(input, mesh, {Replicate()});
    (*seq)(r);
    CHECK(counter.count == 0);
  });
}

TEST_CASE(
    "nn::Sequential remembers which runs fuse per input layout and link: every call chooses as a "
    "fresh search would, and equals the layers one by one",
    "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    // Eight conv / group norm / relu blocks of 32 channels, f32: at the
    // default message cost the cost model fuses the first blocks only, the
    // fewer the wider the tile (recomputing its overlap costs more than the
    // messages saved), over a slow link all eight.
    auto blocks = [&] {
      nn::manual_seed(11);
      nn::ConvOptions o;
      o.padding = {1};
      std::vector<std::shared_ptr<nn::Module>> modules;
      for (int b = 0; b < 8; ++b) {
        modules.push_back(std::make_shared<nn::Conv2d>(b == 0 ? 2 : 32, 32, 3, o));
        modules.push_back(std::make_shared<nn::GroupNorm>(4, 32));
        modules.push_back(std::make_shared<nn::ReLU>());
      }
      auto seq = std::make_shared<nn::Sequential>(modules);
      seq->distribute(mesh);
      return seq;
    };
    const auto kept = blocks();
    struct Run {
      Tensor y;
      std::vector<std::size_t> chains;  // the arguments of each chain run
    };
    auto run = [&](nn::Module& net, const Tensor& input) {
      NoGradGuard no_grad;
      ChainCounter counter;
      const DTensor y = net(distribute_tensor(input, mesh, {Shard(2)}));
      return Run{y.full_tensor().to(DType::F64), counter.arguments};
    };
    const Tensor narrow = Tensor::rand({1, 2, 16, 128}, DType::F32, 5);
    const Tensor wide = Tensor::rand({1, 2, 16, 1024}, DType::F32, 6);
    const std::optional<Config::SimLink> loopback, slow = Config::SimLink{5000, std::nullopt};
    // Revisited layouts and links, in an order where a decision remembered
    // under the wrong key would be reused: a run remembered is checked again
    // before it fuses, so what a wrong key would show is a shorter run than
    // a fresh search finds (the wide tile's, on the narrow tile or over the
    // slow link).
    std::vector<std::vector<std::size_t>> chains;
    for (const auto& [input, link] :
         {std::pair{wide, loopback}, std::pair{narrow, loopback}, std::pair{wide, slow},
          std::pair{narrow, slow}, std::pair{narrow, loopback}, std::pair{wide, loopback}}) {
      ScopedConfig knob([link = link](Config& c) { c.sim_link = link; });
      const Run remembered = run(*kept, input);
      const Run fresh = run(*blocks(), input);  // new modules: nothing remembered
      INFO("link " << (link ? "slow" : "loopback") << ", width " << input.shape()[3]
                   << ", chains of " << fmt::format("{}", fmt::join(remembered.chains, ", "))
                   << " arguments");
      CHECK(remembered.chains == fresh.chains);
      CHECK(max_abs_diff(remembered.y, fresh.y) == 0.0);  // the same chains, the same sums
      Run unfused;
      {
        ScopedConfig off([](Config& c) { c.halo_fusion = false; });
        unfused = run(*kept, input);
      }
      CHECK(unfused.chains.empty());
      // Summed in other orders (three norms deep, ~1e-4 of the largest value).
      CHECK(max_relative_error(remembered.y, unfused.y) <= 1e-3);
      chains.push_back(remembered.chains);
    }
    // The layouts and links chose differently, so a key that left one out
    // would have been caught above.
    INFO(fmt::format("chains per call: {}", chains));
    CHECK(chains[0] != chains[1]);
    CHECK(chains[1] != chains[3]);
    CHECK(chains[2].size() == 1);
  });
}

TEST_CASE(
    "nn::Sequential's remembered runs follow train / eval, with batch norms' running statistics "
    "and Pad + Conv",
    "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    // Zero-padded blocks (a Pad before a Conv that pads nothing) with batch
    // norms, cut by the cost model into a chain and layers one by one.
    auto blocks = [&] {
      nn::manual_seed(12);
      nn::ConvOptions valid;
      valid.padding = {0};
      std::vector<std::shared_ptr<nn::Module>> modules;
      for (int b = 0; b < 6; ++b) {
        modules.push_back(std::make_shared<nn::Pad>(ConvParams::Padding{{1, 1}}));
        modules.push_back(std::make_shared<nn::Conv2d>(b == 0 ? 2 : 32, 32, 3, valid));
        modules.push_back(std::make_shared<nn::BatchNorm>(32));
        modules.push_back(std::make_shared<nn::ReLU>());
      }
      auto seq = std::make_shared<nn::Sequential>(modules);
      seq->distribute(mesh);
      return seq;
    };
    const Tensor input = Tensor::rand({2, 2, 16, 64}, DType::F32, 7);
    auto run = [&](nn::Module& net) {
      NoGradGuard no_grad;
      ChainCounter counter;
      const DTensor y = net(distribute_tensor(input, mesh, {Shard(2)}));
      std::vector<Tensor> out{y.full_tensor().to(DType::F64)};
      for (auto& [name, b] : net.named_buffers())
        if (name.find("running") != std::string::npos)
          out.push_back(b->full_tensor().to(DType::F64));
      return std::pair{out, counter.arguments};
    };
    // `kept` runs fused (remembering), `twin` the same modules one by one:
    // the same history of running statistics.
    const auto kept = blocks(), twin = blocks();
    auto step = [&](const char* what) {
      INFO(what);
      const auto [fused, chains] = run(*kept);
      // A fresh search: new modules, nothing remembered, the same mode.
      const auto fresh = blocks();
      fresh->train(kept->is_training());
      CHECK(run(*fresh).second == chains);
      decltype(run(*twin)) unfused;
      {
        ScopedConfig off([](Config& c) { c.halo_fusion = false; });
        unfused = run(*twin);
      }
      REQUIRE(fused.size() == unfused.first.size());
      for (std::size_t k = 0; k < fused.size(); ++k)
        CHECK(max_relative_error(fused[k], unfused.first[k]) <= 1e-3);
      return chains;
    };
    const auto trained = step("training: running statistics updated");
    CHECK(!trained.empty());
    CHECK(step("training, remembered") == trained);
    kept->eval();
    twin->eval();
    step("eval: running statistics read");
    step("eval, remembered");
    kept->train();
    twin->train();
    CHECK(step("training again") == trained);
  });
}

TEST_CASE("nn::Sequential logs each fusion decision once, at debug level, with the model's price",
          "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    nn::manual_seed(5);
    nn::ConvOptions o;
    o.padding = {1};
    // A chain that pays on small tiles, and a convolution with a norm after
    // it: one window layer, nothing to fuse.
    auto chain = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::GroupNorm>(2, 4),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, o)});
    auto single = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::GroupNorm>(2, 4)});
    chain->distribute(mesh);
    single->distribute(mesh);
    const DTensor x =
        distribute_tensor(Tensor::rand({1, 2, 16, 16}, DType::F32, 6), mesh, {Shard(2)});
    std::ostringstream out;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    auto logger = log::logger();
    const auto level = logger->level();
    logger->sinks().push_back(sink);
    logger->set_level(spdlog::level::debug);
    for (int i = 0; i < 2; ++i) {  // the second forward finds the decisions remembered
      (void)(*chain)(x);
      (void)(*single)(x);
    }
    logger->set_level(level);
    logger->sinks().pop_back();
    const std::string text = out.str();
    INFO(text);
    const std::string fused =
        "halo fusion: modules 0-3 of 4 run as one exchange on DTensorSpec(f32, [1, 2, 16, 16]";
    const auto at = text.find(fused);
    REQUIRE(at != std::string::npos);
    CHECK(text.find(fused, at + 1) == std::string::npos);  // once
    CHECK_THAT(text, Catch::Contains("us a step)"));
    const std::string declined = "halo fusion: no run from module 0 of 2 fuses and pays on";
    const auto no = text.find(declined);
    REQUIRE(no != std::string::npos);
    CHECK(text.find(declined, no + 1) == std::string::npos);
  });
}
