#include "ops/window/conv_transpose_call.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "ops/detail/expand_list.h"

namespace dtensor {

ConvTransposeParams ConvTransposeParams::expanded(std::int64_t spatial_dims) const {
  check_arg(spatial_dims >= 1 && spatial_dims <= 3, tconv::kComponent,
            "input: transposed convolutions have 1 to 3 spatial dims, not {}", spatial_dims);
  ConvTransposeParams p;
  p.stride = detail::expand_list(stride, spatial_dims, std::int64_t{1}, "stride", tconv::kComponent,
                                 "a transposed convolution");
  p.padding = detail::expand_list(padding, spatial_dims, std::int64_t{0}, "padding",
                                  tconv::kComponent, "a transposed convolution");
  p.output_padding =
      detail::expand_list(output_padding, spatial_dims, std::int64_t{0}, "output_padding",
                          tconv::kComponent, "a transposed convolution");
  p.dilation = detail::expand_list(dilation, spatial_dims, std::int64_t{1}, "dilation",
                                   tconv::kComponent, "a transposed convolution");
  p.groups = groups;
  return p;
}

std::string ConvTransposeParams::str() const {
  return fmt::format("stride=[{}] padding=[{}] output_padding=[{}] dilation=[{}] groups={}",
                     fmt::join(stride, ", "), fmt::join(padding, ", "),
                     fmt::join(output_padding, ", "), fmt::join(dilation, ", "), groups);
}

namespace tconv {

std::int64_t output_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                           std::int64_t dilation, std::int64_t padding,
                           std::int64_t output_padding) {
  return (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1;
}

ConvTransposeParams check_args(const Shape& input, const Shape& weight,
                               const std::optional<Shape>& bias,
                               const ConvTransposeParams& params) {
  ConvTransposeParams p = detail::checked_weighted_params(
      input, weight, params, kComponent, kNames.input_layout, kNames.weight_layout);
  const auto n_spatial = static_cast<std::int64_t>(input.size()) - 2;
  for (std::int64_t i = 0; i < n_spatial; ++i) {
    const auto u = static_cast<std::size_t>(i);
    // Bounds that keep the output length far from overflowing.
    constexpr std::int64_t kMaxParam = std::int64_t{1} << 40;
    check_arg(p.stride[u] <= kMaxParam && p.dilation[u] <= kMaxParam && p.padding[u] <= kMaxParam &&
                  p.output_padding[u] <= kMaxParam && weight[2 + u] <= kMaxParam,
              kComponent,
              "padding: stride, dilation, padding, output_padding and kernel extents must be at "
              "most 2^40");
    DTENSOR_CHECK_ARG(p.padding[u] >= 0, kComponent, "padding: must be >= 0, got [{}]",
                      fmt::join(p.padding, ", "));
    DTENSOR_CHECK_ARG(p.output_padding[u] >= 0, kComponent,
                      "output_padding: must be >= 0, got [{}]", fmt::join(p.output_padding, ", "));
    check_arg(p.output_padding[u] < p.stride[u] || p.output_padding[u] < p.dilation[u], kComponent,
              "output_padding: {} in spatial dim {} must be smaller than either the stride ({}) "
              "or the dilation ({})",
              p.output_padding[u], i, p.stride[u], p.dilation[u]);
  }
  check_arg(p.groups >= 1, kComponent, "groups: must be >= 1, got {}", p.groups);
  const std::int64_t channels = input[1];
  DTENSOR_CHECK_ARG(weight[0] >= 0 && weight[1] >= 0, kComponent, "weight: negative extent in {}",
                    shape_str(weight));
  check_arg(channels % p.groups == 0, kComponent,
            "groups: {} groups do not divide the input's {} channels", p.groups, channels);
  DTENSOR_CHECK_ARG(
      weight[0] == channels, kComponent,
      "weight: shape {} is for {} input channels (expected [C_in, C_out/groups, k...]), the "
      "input {} has {}",
      shape_str(weight), weight[0], shape_str(input), channels);
  for (std::int64_t i = 0; i < n_spatial; ++i)
    DTENSOR_CHECK_ARG(weight[static_cast<std::size_t>(2 + i)] >= 1, kComponent,
                      "weight: kernel extents must be >= 1, got shape {}", shape_str(weight));
  const std::int64_t out_channels = weight[1] * p.groups;
  if (bias)
    DTENSOR_CHECK_ARG(bias->size() == 1 && (*bias)[0] == out_channels, kComponent,
                      "bias: expected shape [{}] (one per output channel), got {}", out_channels,
                      shape_str(*bias));
  for (std::int64_t i = 0; i < n_spatial; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const std::int64_t len = input[2 + u];
    DTENSOR_CHECK_ARG(
        len >= 1, kComponent,
        "input: spatial dim {} is empty (shape {}); a transposed convolution needs inputs", i,
        shape_str(input));
    const std::int64_t o = output_length(len, weight[2 + u], p.stride[u], p.dilation[u],
                                         p.padding[u], p.output_padding[u]);
    check_arg(o >= 1, kComponent,
              "padding: {} in spatial dim {} (length {}, kernel {}, stride {}, dilation {}, "
              "output_padding {}) leaves an output of length {}",
              p.padding[u], i, len, weight[2 + u], p.stride[u], p.dilation[u], p.output_padding[u],
              o);
  }
  return p;
}

Shape output_shape(const Shape& input, const Shape& weight, const ConvTransposeParams& params) {
  const ConvTransposeParams p = check_args(input, weight, std::nullopt, params);
  Shape out{input[0], weight[1] * p.groups};
  for (std::size_t i = 0; i < p.stride.size(); ++i)
    out.push_back(output_length(input[2 + i], weight[2 + i], p.stride[i], p.dilation[i],
                                p.padding[i], p.output_padding[i]));
  return out;
}

ConvParams local_convolution(const ConvTransposeParams& params) {
  ConvParams c;
  c.stride = params.stride;
  c.dilation = params.dilation;
  c.padding.assign(params.stride.size(), {0, 0});
  c.groups = params.groups;
  return c;
}

}  // namespace tconv
}  // namespace dtensor
