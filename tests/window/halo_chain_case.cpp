// The random chains of the halo chain tests (halo_chain_case.h).
#include "tests/window/halo_chain_case.h"

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

namespace dtensor::testing::chain {
namespace {

std::int64_t uni(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

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

}  // namespace

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

void run_cases(const DeviceMesh& mesh, int cases, std::uint64_t seed, DType dtype,
               double tolerance) {
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

}  // namespace dtensor::testing::chain
