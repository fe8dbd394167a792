#include "ops/window/halo_chain_plan.h"

#include <algorithm>

#include "dtensor/core/errors.h"
#include "dtensor/ops/conv_params.h"

namespace dtensor::detail {

WindowDim chain_window(const std::vector<ChainConvDim>& convs) {
  std::int64_t extent = 1, left = 0, right = 0;
  for (const auto& c : convs) {
    extent += c.extent - 1;
    left += c.pad_left;
    right += c.extent - 1 - c.pad_left;
  }
  return WindowDim::sliding(extent, 1, 1, left, right, Boundary::Zeros);
}

ChainDimPlan plan_chain_dim(std::int64_t length, std::int64_t owned_begin, std::int64_t owned_end,
                            std::int64_t window_begin, std::int64_t window_end,
                            const std::vector<ChainConvDim>& convs) {
  ChainDimPlan plan;
  plan.owned_begin = owned_begin;
  plan.owned_end = owned_end;
  const bool idle = owned_end <= owned_begin;
  // What the convolutions after k read beyond the share, on each side.
  std::vector<std::int64_t> later_left(convs.size(), 0), later_right(convs.size(), 0);
  for (std::size_t k = convs.size(); k-- > 1;) {
    later_left[k - 1] = later_left[k] + convs[k].pad_left;
    later_right[k - 1] = later_right[k] + convs[k].extent - 1 - convs[k].pad_left;
  }
  std::int64_t in_begin = idle ? owned_begin : window_begin;
  std::int64_t in_end = idle ? owned_begin : window_end;
  for (std::size_t k = 0; k < convs.size(); ++k) {
    ChainStep s;
    s.in_begin = in_begin;
    s.in_end = in_end;
    s.out_begin = idle ? owned_begin : std::max<std::int64_t>(0, owned_begin - later_left[k]);
    s.out_end = idle ? owned_begin : std::min(length, owned_end + later_right[k]);
    // Output o reads o - pad_left + j, j < extent: the local padding lines
    // the held input [in_begin, in_end) up with [out_begin, out_end).
    s.pad_left = s.in_begin - s.out_begin + convs[k].pad_left;
    s.pad_right = s.out_end - convs[k].pad_left + convs[k].extent - 1 - s.in_end;
    DTENSOR_CHECK_ARG(s.pad_left >= 0 && s.pad_right >= 0 && s.pad_left < convs[k].extent &&
                          s.pad_right < convs[k].extent,
                      "halo_chain",
                      "internal: convolution {} needs input [{}, {}) for output [{}, {}) but holds "
                      "[{}, {})",
                      k, s.out_begin - convs[k].pad_left,
                      s.out_end - convs[k].pad_left + convs[k].extent - 1, s.out_begin, s.out_end,
                      s.in_begin, s.in_end);
    plan.steps.push_back(s);
    in_begin = s.out_begin;
    in_end = s.out_end;
  }
  return plan;
}

ChainSubStep chain_sub_step(const ChainStep& s, std::int64_t extent, std::int64_t a,
                            std::int64_t b) {
  ChainSubStep sub;
  if (b <= a) return sub;
  // A chain's convolutions have stride 1 and their dilation inside `extent`.
  const ConvInputRange r = conv_input_range(s.in_end - s.in_begin, extent, 1, 1, s.pad_left, a, b);
  sub.a = a;
  sub.b = b;
  sub.in_a = r.lo;
  sub.in_b = r.hi;
  sub.pad_left = r.pad_lo;
  sub.pad_right = r.pad_hi;
  return sub;
}

std::pair<std::int64_t, std::int64_t> chain_interior(const ChainStep& s, std::int64_t extent,
                                                     std::int64_t own_begin, std::int64_t own_end) {
  const std::int64_t held = s.in_end - s.in_begin, outputs = s.out_end - s.out_begin;
  const std::int64_t own_lo = std::clamp<std::int64_t>(own_begin - s.in_begin, 0, held);
  const std::int64_t own_hi = std::clamp<std::int64_t>(own_end - s.in_begin, own_lo, held);
  // Held rows below own_lo and from own_hi on are the halo: output j reads
  // j - pad_left + [0, extent), so it must start at own_lo or later and end
  // before own_hi (where there is a halo on that side).
  std::int64_t a = own_lo > 0 ? own_lo + s.pad_left : 0;
  std::int64_t b = own_hi < held ? own_hi - extent + 1 + s.pad_left : outputs;
  a = std::clamp<std::int64_t>(a, 0, outputs);
  b = std::clamp<std::int64_t>(b, a, outputs);
  return {a, b};
}

}  // namespace dtensor::detail
