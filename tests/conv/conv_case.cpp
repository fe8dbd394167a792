#include "tests/conv/conv_case.h"

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/placement/dtensor.h"
#include "tools/reference/reference_conv.h"
#include "tools/reference/reference_window_ops.h"

namespace dtensor::testing {

using namespace dtensor::reference;

std::string ConvCase::str() const {
  return fmt::format(
      "input {} oc {} kernel {} {} bias {} mesh {} input [{}] weight [{}] {} seed {}",
      shape_str(input), out_channels, shape_str(kernel), params.str(), bias, shape_str(mesh),
      placements_str(input_placements), placements_str(weight_placements), dtype_name(dtype), seed);
}

double conv_tolerance(DType dtype, std::int64_t reduction, double magnitude) {
  const double scale = std::max(1.0, magnitude);
  switch (dtype) {
    case DType::F64:
      return 1e-10 * scale;
    case DType::F32:
      // Rounding of products and a sum of `reduction` terms, with slack for
      // the order of summation: ~ eps * sqrt(n) is typical, eps * n the bound.
      return 2e-7 * static_cast<double>(reduction) * scale / 4 + 1e-6 * scale;
    case DType::BF16:
      return 2e-2 * scale * std::sqrt(static_cast<double>(reduction));
    case DType::F16:
      // The same shape as bf16 with f16's unit roundoff (2^-11 vs 2^-8): the
      // CPU computes f16 in f32, so only storage and Partial roundings count.
      return 2.5e-3 * scale * std::sqrt(static_cast<double>(reduction));
    case DType::I64:  // no convolution of integers
      break;
  }
  return 0;
}

ConvErrors check_conv_case(const ConvCase& c) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, c.mesh);
  const std::int64_t nsp = static_cast<std::int64_t>(c.kernel.size());
  const std::int64_t cin = c.input[1];
  Shape wshape{c.out_channels, cin / c.params.groups};
  for (auto k : c.kernel)
    wshape.push_back(k);
  const Tensor X = Tensor::rand(c.input, c.dtype, c.seed * 4 + 1);
  const Tensor W = Tensor::rand(wshape, c.dtype, c.seed * 4 + 2);
  const Tensor B = c.bias ? Tensor::rand({c.out_channels}, c.dtype, c.seed * 4 + 3) : Tensor();
  // A padding mode other than zeros: F.pad then the zero-padded convolution.
  const bool padded = c.params.padding_mode != PaddingMode::Zeros;
  const Tensor Yref = padded ? ref_conv_padding_mode_forward(X, W, B, c.params)
                             : ref_conv_forward(X, W, B, c.params);
  const Tensor GY = Tensor::rand(Yref.shape(), c.dtype, c.seed * 4 + 4);

  const Placements wp =
      c.weight_placements.empty() ? Placements(mesh.ndim(), Replicate()) : c.weight_placements;
  Placements bp;
  for (auto& p : wp)
    bp.push_back(p.is_shard(0) ? Shard(0) : Replicate());
  auto x = distribute_tensor(X, mesh, c.input_placements);
  auto w = distribute_tensor(W, mesh, wp);
  std::optional<DTensor> b;
  if (c.bias) b = distribute_tensor(B, mesh, bp);
  auto y = convolution(x, w, b, c.params);

  std::int64_t red = wshape[1];
  for (auto k : c.kernel)
    red *= k;
  ConvErrors e;
  e.output = max_abs_diff(y.full_tensor(), Yref);
  const double ymag = max_abs(Yref);
  CHECK(e.output <= conv_tolerance(c.dtype, red, ymag));

  // grad_output placed like the output, as autograd would hand it over.
  auto gy = distribute_tensor(
      GY, mesh,
      y.placements()[0].is_partial() ? Placements(mesh.ndim(), Replicate()) : y.placements());
  auto g = convolution_backward(gy, x, w, c.params, {true, true, c.bias});
  const Tensor GXref = padded ? ref_conv_padding_mode_grad_input(GY, W, c.input, c.params)
                              : ref_conv_grad_input(GY, W, c.input, c.params);
  const Tensor GWref = padded ? ref_conv_padding_mode_grad_weight(GY, X, wshape, c.params)
                              : ref_conv_grad_weight(GY, X, wshape, c.params);
  REQUIRE(g.grad_input.has_value());
  REQUIRE(g.grad_input->shape() == c.input);
  // Placed like the input, except a pending sum where the input is replicated;
  // a Partial input's gradient may come in any placement.
  for (std::size_t m = 0; m < x.placements().size(); ++m) {
    const Placement& gp = g.grad_input->placements()[m];
    const Placement& xp = x.placements()[m];
    REQUIRE((gp == xp || xp.is_partial() || (gp.is_partial() && xp.is_replicate())));
  }
  e.grad_input = max_abs_diff(g.grad_input->full_tensor(), GXref);
  std::int64_t red_in = c.out_channels / c.params.groups;
  for (auto k : c.kernel)
    red_in *= k;
  CHECK(e.grad_input <= conv_tolerance(c.dtype, red_in, max_abs(GXref)));
  std::int64_t red_w = c.input[0];
  for (std::int64_t d = 0; d < nsp; ++d)
    red_w *= Yref.shape()[2 + d];
  e.grad_weight = max_abs_diff(g.grad_weight->full_tensor(), GWref);
  CHECK(e.grad_weight <= conv_tolerance(c.dtype, red_w, max_abs(GWref)));
  if (c.bias) {
    const Tensor GBref = ref_conv_grad_bias(GY);
    e.grad_bias = max_abs_diff(g.grad_bias->full_tensor(), GBref);
    CHECK(e.grad_bias <=
          conv_tolerance(c.dtype, red_w / std::max<std::int64_t>(1, 1), max_abs(GBref)));
  }
  return e;
}

ConvCase random_conv_case(std::mt19937_64& rng, const Shape& mesh, DType dtype) {
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  ConvCase c;
  c.mesh = mesh;
  c.dtype = dtype;
  c.seed = rng();
  const std::int64_t nsp = uni(1, 3);
  const std::int64_t max_len = nsp == 1 ? 24 : nsp == 2 ? 12 : 7;
  std::int64_t groups = 1;
  switch (uni(0, 3)) {
    case 0:
      groups = 1;
      break;
    case 1:
      groups = 2;
      break;
    case 2:
      groups = 3;
      break;
    default:
      groups = 0;
      break;  // depthwise
  }
  const std::int64_t cin = groups == 0 ? uni(1, 4) : groups * uni(1, 2);
  if (groups == 0) groups = cin;
  c.out_channels = groups * uni(1, 2);
  c.input = {uni(1, 3), cin};
  c.params.stride.clear();
  c.params.dilation.clear();
  c.params.padding.clear();
  c.params.groups = groups;
  for (std::int64_t d = 0; d < nsp; ++d) {
    // Draw until the output is non-empty (kernel extent within the padded input).
    while (true) {
      const std::int64_t L = uni(1, max_len), K = uni(1, nsp == 3 ? 4 : 7), s = uni(1, 4),
                         dil = uni(1, 3), pl = uni(0, 4), pr = uni(0, 4);
      if (L + pl + pr < dil * (K - 1) + 1) continue;
      c.input.push_back(L);
      c.kernel.push_back(K);
      c.params.stride.push_back(s);
      c.params.dilation.push_back(dil);
      c.params.padding.emplace_back(pl, pr);
      break;
    }
  }
  c.bias = uni(0, 3) != 0;
  // Placements: mostly spatial shards (the halo path), some batch and replicate.
  std::vector<std::int64_t> used;
  for (std::size_t m = 0; m < mesh.size(); ++m) {
    const std::int64_t pick = uni(0, 9);
    if (pick <= 6) {
      std::int64_t d = 2 + uni(0, nsp - 1);
      if (std::find(used.begin(), used.end(), d) != used.end()) d = -1;
      if (d >= 0) {
        used.push_back(d);
        c.input_placements.push_back(Shard(d));
        continue;
      }
    }
    c.input_placements.push_back(pick == 7 ? Shard(0) : Replicate());
  }
  return c;
}

ConvCase random_padding_mode_case(std::mt19937_64& rng, const Shape& mesh, DType dtype) {
  ConvCase c = random_conv_case(rng, mesh, dtype);
  const PaddingMode modes[] = {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular};
  c.params.padding_mode = modes[std::uniform_int_distribution<int>(0, 2)(rng)];
  // F.pad's limits: reflect pads < L, circular pads <= L. Shrink the padding
  // to fit, and keep the output non-empty.
  for (std::size_t d = 0; d < c.kernel.size(); ++d) {
    const std::int64_t L = c.input[d + 2];
    const std::int64_t cap = c.params.padding_mode == PaddingMode::Reflect ? L - 1 : L;
    auto& [pl, pr] = c.params.padding[d];
    pl = std::min(pl, cap);
    pr = std::min(pr, cap);
    const std::int64_t extent = c.params.dilation[d] * (c.kernel[d] - 1) + 1;
    while (L + pl + pr < extent) {
      c.kernel[d] = std::max<std::int64_t>(1, c.kernel[d] - 1);
      if (c.kernel[d] == 1) c.params.dilation[d] = 1;
      if (c.params.dilation[d] * (c.kernel[d] - 1) + 1 <= L + pl + pr) break;
    }
  }
  return c;
}

}  // namespace dtensor::testing
