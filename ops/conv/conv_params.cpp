#include "dtensor/ops/conv_params.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "ops/conv/conv_call.h"
#include "ops/detail/expand_list.h"
#include "ops/detail/weighted_call.h"
#include "ops/window/integer_division.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "conv";

std::string padding_str(const ConvParams::Padding& p) {
  std::vector<std::string> parts;
  for (const auto& [l, r] : p)
    parts.push_back(fmt::format("({}, {})", l, r));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

}  // namespace

ConvParams::Padding ConvParams::symmetric_padding(const std::vector<std::int64_t>& pads) {
  Padding out;
  out.reserve(pads.size());
  for (auto p : pads)
    out.emplace_back(p, p);
  return out;
}

ConvParams ConvParams::expanded(std::int64_t spatial_dims) const {
  check_arg(spatial_dims >= 1 && spatial_dims <= 3, kComponent,
            "input: convolutions have 1 to 3 spatial dims, not {}", spatial_dims);
  ConvParams p;
  p.stride = detail::expand_list(stride, spatial_dims, std::int64_t{1}, "stride", kComponent,
                                 "a convolution");
  p.padding =
      detail::expand_list(padding, spatial_dims, std::pair<std::int64_t, std::int64_t>{0, 0},
                          "padding", kComponent, "a convolution");
  p.dilation = detail::expand_list(dilation, spatial_dims, std::int64_t{1}, "dilation", kComponent,
                                   "a convolution");
  p.groups = groups;
  p.padding_mode = padding_mode;
  return p;
}

std::string_view padding_mode_name(PaddingMode m) {
  switch (m) {
    case PaddingMode::Zeros:
      return "zeros";
    case PaddingMode::Reflect:
      return "reflect";
    case PaddingMode::Replicate:
      return "replicate";
    case PaddingMode::Circular:
      return "circular";
  }
  return "?";
}

std::string ConvParams::str() const {
  return fmt::format("stride=[{}] padding={} dilation=[{}] groups={}{}", fmt::join(stride, ", "),
                     padding_str(padding), fmt::join(dilation, ", "), groups,
                     padding_mode == PaddingMode::Zeros
                         ? std::string()
                         : fmt::format(" padding_mode={}", padding_mode_name(padding_mode)));
}

std::int64_t conv_kernel_extent(std::int64_t kernel, std::int64_t dilation) {
  std::int64_t span = 0;
  DTENSOR_CHECK_ARG(!__builtin_mul_overflow(dilation, kernel - 1, &span) &&
                        span < std::numeric_limits<std::int64_t>::max(),
                    "conv",
                    "dilation={} with a kernel of {} spans more positions than a 64-bit "
                    "length can hold",
                    dilation, kernel);
  return span + 1;
}

namespace {

// a * b + c, refused with an InvalidArgument naming `what` past 64 bits.
std::int64_t checked_mul_add(std::int64_t a, std::int64_t b, std::int64_t c, const char* what) {
  std::int64_t r = 0;
  DTENSOR_CHECK_ARG(!__builtin_mul_overflow(a, b, &r) && !__builtin_add_overflow(r, c, &r), "conv",
                    "{}: {} x {} + {} is past what a 64-bit length can hold", what, a, b, c);
  return r;
}

}  // namespace

ConvInputRange conv_input_range(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                                std::int64_t dilation, std::int64_t pad_left, std::int64_t out_lo,
                                std::int64_t out_hi) {
  const std::int64_t first = checked_mul_add(out_lo, stride, -pad_left, "stride");  // may be < 0
  const std::int64_t last = checked_mul_add(
      out_hi - 1, stride, conv_kernel_extent(kernel, dilation) - pad_left, "stride");
  ConvInputRange r;
  r.lo = std::max<std::int64_t>(first, 0);
  r.hi = std::min(last, length);
  r.pad_lo = r.lo - first;
  r.pad_hi = last - r.hi;
  return r;
}

std::int64_t conv_output_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                                std::int64_t dilation, std::int64_t pad_left,
                                std::int64_t pad_right) {
  std::int64_t padded = 0;
  DTENSOR_CHECK_ARG(!__builtin_add_overflow(length, pad_left, &padded) &&
                        !__builtin_add_overflow(padded, pad_right, &padded),
                    "conv",
                    "padding: ({}, {}) around a length of {} is past what a 64-bit length can hold",
                    pad_left, pad_right, length);
  DTENSOR_CHECK_ARG(stride >= 1, "conv", "stride: must be >= 1, got {}", stride);
  return window::floor_div(padded - conv_kernel_extent(kernel, dilation), stride) + 1;
}

ConvParams check_conv_args(const Shape& input, const Shape& weight,
                           const std::optional<Shape>& bias, const ConvParams& params) {
  ConvParams p = detail::checked_weighted_params(
      input, weight, params, kComponent, conv::kNames.input_layout, conv::kNames.weight_layout);
  const auto n_spatial = static_cast<std::int64_t>(input.size()) - 2;

  // Bounds that keep every length computation far from overflowing (a
  // padding of 2^63 - 1 would otherwise wrap around to a "valid" output).
  constexpr std::int64_t kMaxParam = std::int64_t{1} << 40;
  for (std::int64_t i = 0; i < n_spatial; ++i) {
    DTENSOR_CHECK_ARG(
        p.stride[i] <= kMaxParam && p.dilation[i] <= kMaxParam && p.padding[i].first <= kMaxParam &&
            p.padding[i].second <= kMaxParam &&
            weight[static_cast<std::size_t>(2 + i)] <= kMaxParam,
        kComponent,
        "padding: stride, dilation, padding and kernel extents must be at most 2^40, got "
        "stride {} dilation {} padding ({}, {}) kernel {}",
        p.stride[i], p.dilation[i], p.padding[i].first, p.padding[i].second,
        weight[static_cast<std::size_t>(2 + i)]);
    DTENSOR_CHECK_ARG(p.padding[i].first >= 0 && p.padding[i].second >= 0, kComponent,
                      "padding: must be >= 0 on both sides, got {}", padding_str(p.padding));
  }
  check_arg(p.groups >= 1, kComponent, "groups: must be >= 1, got {}", p.groups);

  const std::int64_t channels = input[1];
  const std::int64_t out_channels = weight[0];
  DTENSOR_CHECK_ARG(out_channels >= 0 && weight[1] >= 0, kComponent,
                    "weight: negative extent in {}", shape_str(weight));
  check_arg(channels % p.groups == 0, kComponent,
            "groups: {} groups do not divide the input's {} channels", p.groups, channels);
  check_arg(out_channels % p.groups == 0, kComponent,
            "groups: {} groups do not divide the weight's {} output channels", p.groups,
            out_channels);
  DTENSOR_CHECK_ARG(
      weight[1] * p.groups == channels, kComponent,
      "weight: shape {} expects {} input channels ({} per group x {} groups), the input {} "
      "has {}",
      shape_str(weight), weight[1] * p.groups, weight[1], p.groups, shape_str(input), channels);
  for (std::int64_t i = 0; i < n_spatial; ++i)
    DTENSOR_CHECK_ARG(weight[2 + i] >= 1, kComponent,
                      "weight: kernel extents must be >= 1, got shape {}", shape_str(weight));
  if (bias) {
    DTENSOR_CHECK_ARG(bias->size() == 1 && (*bias)[0] == out_channels, kComponent,
                      "bias: expected shape [{}] (one per output channel), got {}", out_channels,
                      shape_str(*bias));
  }
  for (std::int64_t i = 0; i < n_spatial; ++i) {
    const std::int64_t len = input[2 + i];
    const std::int64_t o = conv_output_length(len, weight[2 + i], p.stride[i], p.dilation[i],
                                              p.padding[i].first, p.padding[i].second);
    DTENSOR_CHECK_ARG(
        o >= 1, kComponent,
        "input: spatial dim {} of length {} with padding ({}, {}) is shorter than the "
        "kernel's extent {} (kernel {}, dilation {}): the output would be empty",
        i, len, p.padding[i].first, p.padding[i].second,
        conv_kernel_extent(weight[2 + i], p.dilation[i]), weight[2 + i], p.dilation[i]);
    // nn.Conv*d pads with F.pad, whose modes have limits of their own.
    const auto [pl, pr] = p.padding[i];
    const bool pads = pl > 0 || pr > 0;
    if (p.padding_mode == PaddingMode::Reflect)
      check_arg(!pads || (pl < len && pr < len), kComponent,
                "padding: reflect padding ({}, {}) must be less than the input length {} of "
                "spatial dim {}",
                pl, pr, len, i);
    if (p.padding_mode == PaddingMode::Circular)
      check_arg(pl <= len && pr <= len, kComponent,
                "padding: circular padding ({}, {}) must be at most the input length {} of "
                "spatial dim {}",
                pl, pr, len, i);
    if (p.padding_mode == PaddingMode::Replicate)
      check_arg(!pads || len >= 1, kComponent,
                "padding: replicate padding of spatial dim {}, which is empty", i);
  }
  return p;
}

Shape conv_output_shape(const Shape& input, const Shape& weight, const ConvParams& params) {
  const ConvParams p = check_conv_args(input, weight, std::nullopt, params);
  Shape out{input[0], weight[0]};
  for (std::size_t i = 0; i < p.stride.size(); ++i)
    out.push_back(conv_output_length(input[2 + i], weight[2 + i], p.stride[i], p.dilation[i],
                                     p.padding[i].first, p.padding[i].second));
  return out;
}

}  // namespace dtensor
