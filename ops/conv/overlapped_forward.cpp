#include "ops/conv/overlapped_forward.h"

#include <cstdlib>
#include <string>

#include "ops/conv/halo_exchange.h"
#include "ops/conv/integer_division.h"

namespace dtensor::conv {
namespace {

// One piece of the output along the dim: outputs [lo, hi) of a window of
// `window_len` positions, as the input range and padding to convolve.
ConvInputRange piece(const Shape& weight_shape, const ConvParams& p, std::int64_t sd,
                     std::int64_t window_len, std::int64_t lo, std::int64_t hi) {
  return conv_input_range(window_len, weight_shape[static_cast<std::size_t>(sd) + 2],
                          p.stride[static_cast<std::size_t>(sd)],
                          p.dilation[static_cast<std::size_t>(sd)],
                          p.padding[static_cast<std::size_t>(sd)].first, lo, hi);
}

ConvParams with_padding(ConvParams p, std::int64_t sd, const ConvInputRange& r) {
  p.padding[static_cast<std::size_t>(sd)] = {r.pad_lo, r.pad_hi};
  return p;
}

}  // namespace

OverlapMode overlap_mode() {
  const char* v = std::getenv("DTENSOR_CONV_OVERLAP");
  const std::string mode = v ? v : "";
  if (mode == "1") return OverlapMode::Auto;
  if (mode == "always") return OverlapMode::Always;
  return OverlapMode::Never;
}

std::optional<InteriorOutputs> interior_outputs(const HaloRankPlan& me, const Shape& weight_shape,
                                                const ConvParams& params, std::int64_t sd,
                                                std::int64_t out_len, std::int64_t window_elements,
                                                bool force) {
  if (me.recv.empty() || !me.has_output || me.window_in_padding || out_len <= 0) return {};
  const auto i = static_cast<std::size_t>(sd);
  const std::int64_t s = params.stride[i], lp = params.padding[i].first;
  const std::int64_t extent = conv_kernel_extent(weight_shape[i + 2], params.dilation[i]);
  const Extent own = me.own_part();
  const std::int64_t own_lo = own.offset - me.window.offset, own_hi = own_lo + own.length;
  // Output o reads window positions [o*s - lp, o*s - lp + extent).
  InteriorOutputs in;
  in.lo = std::max<std::int64_t>(0, ceil_div(own_lo + lp, s));
  in.hi = std::min(out_len, floor_div(own_hi + lp - extent, s) + 1);
  if (in.hi <= in.lo) return {};
  // Each boundary piece must read some data (a piece of padding alone has no
  // input range to hand to a kernel).
  for (auto [lo, hi] : {std::pair{std::int64_t{0}, in.lo}, std::pair{in.hi, out_len}}) {
    if (hi <= lo) continue;
    const ConvInputRange r = piece(weight_shape, params, sd, me.window.length, lo, hi);
    if (r.hi <= r.lo) return {};
  }
  if (!force && (5 * (in.hi - in.lo) < 4 * out_len || window_elements < (std::int64_t{1} << 18)))
    return {};
  return in;
}

Tensor overlapped_forward(const LocalConvKernels& kernels, const Tensor& local, std::int64_t dim,
                          const HaloRankPlan& me, ProcessGroup& group, const Tensor& w,
                          const Tensor& b, const ConvParams& params, const Shape& out_shape,
                          const InteriorOutputs& interior, int tag,
                          const std::function<void()>& before_wait) {
  const std::int64_t sd = dim - 2, out_len = out_shape[static_cast<std::size_t>(dim)];
  PendingWindow pending(local, dim, me, group, tag);
  Tensor y = Tensor::empty(out_shape, local.dtype(), local.device());
  auto compute = [&](const TiledTensor& window, std::int64_t lo, std::int64_t hi) {
    if (hi <= lo) return;
    const ConvInputRange r = piece(w.shape(), params, sd, window.shape()[dim], lo, hi);
    kernels.forward_into(window.narrow(dim, r.lo, r.hi - r.lo), w, b, with_padding(params, sd, r),
                         y.narrow(dim, lo, hi - lo));
  };
  // The interior reads only the own part, which holds data already.
  compute(pending.window(), interior.lo, interior.hi);
  before_wait();
  const TiledTensor& window = pending.wait();
  compute(window, 0, interior.lo);
  compute(window, interior.hi, out_len);
  return y;
}

}  // namespace dtensor::conv
