#include "ops/window/halo_chain_plan.h"

#include <algorithm>

#include "dtensor/core/errors.h"
#include "dtensor/ops/conv_params.h"

namespace dtensor::detail {

bool chain_is_ring(const std::vector<ChainWindowDim>& convs) {
  return !convs.empty() && std::all_of(convs.begin(), convs.end(), [](const ChainWindowDim& c) {
    return c.boundary == Boundary::Circular;
  });
}

bool chain_upsamples(const std::vector<ChainWindowDim>& convs) {
  return std::any_of(convs.begin(), convs.end(),
                     [](const ChainWindowDim& c) { return c.transposed; });
}

namespace {

// A chain that upsamples, read as one transposed window. A sliding layer of
// stride 1 is a transposed one of stride 1 (output o reads o - l + [0, e):
// kernel e, left e - 1 - l, right e - 1 - r). Layer A then layer B: output
// o reads B's inputs ceil((o + l_B - e_B + 1) / s_B) to floor((o + l_B) /
// s_B), and nested floors and ceilings divide once by s_A s_B, so the pair
// is one window of stride s_A s_B, left l_B + s_B l_A, right r_B + s_B r_A
// and kernel e_B + s_B (e_A - 1).
WindowDim upsampling_chain_window(const std::vector<ChainWindowDim>& convs) {
  std::int64_t kernel = 1, left = 0, right = 0, stride = 1;
  for (const auto& c : convs) {
    DTENSOR_CHECK_ARG(c.transposed || c.stride == 1, "halo_chain",
                      "internal: a chain that upsamples has a layer of stride {}", c.stride);
    const std::int64_t l = c.transposed ? c.pad_left : c.extent - 1 - c.pad_left;
    const std::int64_t r = c.transposed ? c.pad_right() : c.extent - 1 - c.pad_right();
    kernel = c.extent + c.stride * (kernel - 1);
    left = l + c.stride * left;
    right = r + c.stride * right;
    stride *= c.stride;
  }
  WindowDim w = WindowDim::transposed(kernel, stride, 1, 0, 0);
  w.pad_left = left;
  w.pad_right = right;
  return w;
}

}  // namespace

WindowDim chain_window(const std::vector<ChainWindowDim>& convs) {
  if (chain_upsamples(convs)) return upsampling_chain_window(convs);
  // Output o of layer k reads its input from o s_k - l_k: composed, the
  // strides multiply and each layer's reach counts in the input's cells.
  std::int64_t extent = 1, left = 0, right = 0, stride = 1;
  for (const auto& c : convs) {
    extent += (c.extent - 1) * stride;
    left += c.pad_left * stride;
    right += c.pad_right() * stride;
    stride *= c.stride;
  }
  return WindowDim::sliding(extent, stride, 1, left, right,
                            chain_is_ring(convs) ? Boundary::Circular : Boundary::Zeros);
}

std::optional<std::string> chain_statistics_refusal(std::int64_t length, std::size_t first,
                                                    const std::vector<ChainWindowDim>& layers) {
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const ChainWindowDim& c = layers[k];
    const std::int64_t out = c.output_length(length);
    if (k >= first && out > 0 && c.transposed) {
      // Every input writes an output (its first inside the output) and
      // every output reads one.
      if (c.extent < c.stride || c.pad_left > c.extent - 1 || c.pad_right() > c.extent - 1)
        return "a norm's statistics would need input cells that an upsample after it reads "
               "none of";
    } else if (k >= first && out > 0) {
      // No gap between two outputs' reads, none after the last one's.
      const auto [lo, hi] = c.reads(0, out);
      if (c.extent < c.stride || hi < length || lo > 0)
        return "a norm's statistics would need input cells that a strided layer after it "
               "reads none of";
    }
    length = out;
  }
  return std::nullopt;
}

std::optional<std::string> chain_boundary_refusal(std::int64_t length, std::int64_t smallest_shard,
                                                  const std::vector<ChainWindowDim>& convs) {
  const bool circular = std::any_of(convs.begin(), convs.end(), [](const ChainWindowDim& c) {
    return c.boundary == Boundary::Circular;
  });
  if (circular && !chain_is_ring(convs))
    return "a chain mixes circular padding with another padding mode";
  if (chain_upsamples(convs) &&
      std::any_of(convs.begin(), convs.end(),
                  [](const ChainWindowDim& c) { return c.boundary != Boundary::Zeros; }))
    return "a chain that upsamples pads with zeros only";
  // Output o reads a multiple of the stride in o + l - e + 1 ... o + l:
  // one there is, when the extent is at least the stride; and the last
  // outputs read the last input while the right padding is not negative.
  if (std::any_of(convs.begin(), convs.end(),
                  [](const ChainWindowDim& c) { return c.transposed && c.extent < c.stride; }))
    return "a transposed window narrower than its stride has outputs that read nothing";
  if (std::any_of(convs.begin(), convs.end(),
                  [](const ChainWindowDim& c) { return c.transposed && c.pad_right() < 0; }))
    return "a transposed window whose output_padding exceeds its padding (a negative right "
           "padding) has outputs that read nothing";
  if (circular) {
    const WindowDim w = chain_window(convs);
    if (w.pad_left > length || w.pad_right > length)
      return "the chain's combined halo wraps around a circular dim more than once";
    return std::nullopt;
  }
  // What the convolutions from k on read beyond the share, on each side.
  std::int64_t reach_left = 0, reach_right = 0;
  for (std::size_t k = convs.size(); k-- > 0;) {
    const ChainWindowDim& c = convs[k];
    reach_left += c.pad_left;
    reach_right += c.pad_right();
    if (c.boundary != Boundary::Reflect) continue;
    if (c.pad_left >= length || c.pad_right() >= length)
      return "a reflect padding is as wide as the input";
    // The edge rank holds [0, o1 + reach_right) with o1 >= its share.
    const std::int64_t held_left = std::min(length, smallest_shard + reach_right);
    const std::int64_t held_right = std::min(length, smallest_shard + reach_left);
    if ((c.pad_left > 0 && held_left < c.pad_left + 1) ||
        (c.pad_right() > 0 && held_right < c.pad_right() + 1))
      return "a reflect padding reads rows the edge rank does not hold (shards too narrow for "
             "its lopsided padding)";
  }
  return std::nullopt;
}

ChainDimPlan plan_chain_dim(std::int64_t length, std::int64_t owned_begin, std::int64_t owned_end,
                            std::int64_t window_begin, std::int64_t window_end,
                            const std::vector<ChainWindowDim>& convs) {
  ChainDimPlan plan;
  plan.owned_begin = owned_begin;
  plan.owned_end = owned_end;
  const bool idle = owned_end <= owned_begin;
  const std::size_t n = convs.size();
  // Every layer's input length (lengths[n]: the chain's output).
  std::vector<std::int64_t>& lengths = plan.lengths;
  lengths = {length};
  for (const auto& c : convs)
    lengths.push_back(c.output_length(lengths.back()));
  // A ring computes the wrapped positions too: they are real cells (its
  // layers are stride-1 and "same").
  const bool ring = chain_is_ring(convs);
  plan.steps.resize(n);
  // Backwards: what each layer computes (what the layers after it read,
  // clipped to its output), and the rank's share of its output.
  std::int64_t a = owned_begin, b = owned_end, share_a = owned_begin, share_b = owned_end;
  for (std::size_t k = n; k-- > 0;) {
    ChainStep& s = plan.steps[k];
    s.out_begin = idle ? owned_begin : a;
    s.out_end = idle ? owned_begin : b;
    // An empty share (the layers after it clip it away) sits where the
    // range begins.
    const bool no_share = idle || share_b <= share_a;
    s.owned_begin = no_share ? s.out_begin : share_a;
    s.owned_end = no_share ? s.out_begin : share_b;
    const ChainWindowDim& c = convs[k];
    const auto [lo, hi] = c.reads(a, b);
    a = ring ? lo : std::max<std::int64_t>(0, lo);
    b = ring ? hi : std::min(lengths[k], hi);
    if (share_b > share_a) {  // (clipped: padding may reach beyond the input)
      const bool last = share_b == lengths[k + 1];
      auto input_share = [&](std::int64_t o) {
        if (c.transposed) {
          // Input i goes to the rank owning output i s - l + shift, one
          // it writes: i from ceil((o + l - shift) / s).
          const std::int64_t shift = std::min(c.pad_left, c.extent - 1);
          return window::ceil_div(o + c.pad_left - shift, c.stride);
        }
        // From the output's, cut where the outputs' reads begin (c keeps
        // it inside them when reads leave no gaps).
        return o * c.stride - std::max<std::int64_t>(0, c.stride + c.pad_left - c.extent);
      };
      share_a = std::clamp<std::int64_t>(input_share(share_a), 0, lengths[k]);
      share_b = last ? lengths[k] : std::clamp<std::int64_t>(input_share(share_b), 0, lengths[k]);
    }
  }
  std::int64_t in_begin = idle ? owned_begin : window_begin;
  std::int64_t in_end = idle ? owned_begin : window_end;
  for (std::size_t k = 0; k < n; ++k) {
    ChainStep& s = plan.steps[k];
    const ChainWindowDim& c = convs[k];
    s.in_begin = in_begin;
    s.in_end = in_end;
    // Outputs [out_begin, out_end) read [lo, hi): the local padding lines
    // the held input up with them, and rows held beyond them are skipped.
    // (An idle rank's padding is the layer's own: it computes nothing.)
    // (A transposed window's reach beyond the input reads nothing: no
    // padding.)
    auto [lo, hi] = idle ? std::pair{in_begin - c.pad_left, in_end + c.pad_right()}
                         : c.reads(s.out_begin, s.out_end);
    if (c.transposed) {
      lo = idle ? in_begin : std::max<std::int64_t>(lo, 0);
      hi = idle ? in_end : std::min(hi, lengths[k]);
    }
    s.pad_left = std::max<std::int64_t>(0, s.in_begin - lo);
    s.pad_right = std::max<std::int64_t>(0, hi - s.in_end);
    s.skip_left = idle ? 0 : std::max<std::int64_t>(0, lo - s.in_begin);
    s.skip_right = idle ? 0 : std::max<std::int64_t>(0, s.in_end - hi);
    DTENSOR_CHECK_ARG(
        s.pad_left < c.extent && s.pad_right < c.extent &&
            (k == 0 || s.skip_left + s.skip_right == 0),
        "halo_chain",
        "internal: window layer {} needs input [{}, {}) for output [{}, {}) but holds "
        "[{}, {})",
        k, lo, hi, s.out_begin, s.out_end, s.in_begin, s.in_end);
    // A padding filled from held rows needs them held (chain_boundary_refusal):
    // reflect reads the edge row and `pad` more, replicate the edge row.
    const std::int64_t held = s.in_end - s.in_begin;
    const bool pads = s.pad_left > 0 || s.pad_right > 0;
    std::int64_t rows_read = 0;
    if (pads && c.boundary == Boundary::Reflect) rows_read = std::max(s.pad_left, s.pad_right) + 1;
    if (pads && c.boundary == Boundary::Replicate) rows_read = 1;
    DTENSOR_CHECK_ARG(idle || held >= rows_read, "halo_chain",
                      "internal: window layer {} fills its {} padding ({}, {}) from {} held rows",
                      k, boundary_name(c.boundary), s.pad_left, s.pad_right, held);
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
