// PoolParams: expansion, the output length rule and the argument checks
// PyTorch applies to max_pool / avg_pool.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/window_ops.h"
#include "ops/detail/expand_list.h"
#include "ops/window/integer_division.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "pool";

}  // namespace

PoolParams PoolParams::expanded(std::int64_t spatial_dims) const {
  check_arg(spatial_dims >= 1 && spatial_dims <= 3, kComponent,
            "input: pools have 1 to 3 spatial dims, not {}", spatial_dims);
  check_arg(!kernel.empty(), kComponent, "kernel: a pool needs a kernel size");
  PoolParams p = *this;
  p.kernel =
      detail::expand_list(kernel, spatial_dims, std::int64_t{1}, "kernel", kComponent, "a pool");
  p.stride = stride.empty() ? p.kernel
                            : detail::expand_list(stride, spatial_dims, std::int64_t{1}, "stride",
                                                  kComponent, "a pool");
  p.padding =
      detail::expand_list(padding, spatial_dims, std::pair<std::int64_t, std::int64_t>{0, 0},
                          "padding", kComponent, "a pool");
  p.dilation = detail::expand_list(dilation, spatial_dims, std::int64_t{1}, "dilation", kComponent,
                                   "a pool");
  return p;
}

std::string PoolParams::str() const {
  std::vector<std::string> pads;
  for (const auto& [l, r] : padding)
    pads.push_back(fmt::format("({}, {})", l, r));
  return fmt::format(
      "kernel=[{}] stride=[{}] padding=[{}] dilation=[{}] ceil_mode={} count_include_pad={} "
      "divisor_override={}",
      fmt::join(kernel, ", "), fmt::join(stride, ", "), fmt::join(pads, ", "),
      fmt::join(dilation, ", "), ceil_mode, count_include_pad,
      divisor_override ? std::to_string(*divisor_override) : "none");
}

std::int64_t pool_output_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                                std::int64_t dilation, std::int64_t pad_left,
                                std::int64_t pad_right, bool ceil_mode) {
  const std::int64_t span = length + pad_left + pad_right - dilation * (kernel - 1) - 1;
  std::int64_t o =
      (ceil_mode ? window::ceil_div(span, stride) : window::floor_div(span, stride)) + 1;
  // With ceil_mode the last window must start inside the input or the left
  // padding: one starting in the right padding is dropped.
  if (ceil_mode && (o - 1) * stride >= length + pad_left) --o;
  return o;
}

}  // namespace dtensor
