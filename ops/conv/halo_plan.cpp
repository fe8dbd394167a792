#include "ops/conv/halo_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/conv_params.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "conv";

// [lo, hi) ∩ [lo2, hi2), or an empty range.
std::pair<std::int64_t, std::int64_t> intersect(std::int64_t lo, std::int64_t hi, std::int64_t lo2,
                                                std::int64_t hi2) {
  return {std::max(lo, lo2), std::min(hi, hi2)};
}

}  // namespace

Extent HaloRankPlan::own_part() const {
  const auto [lo, hi] = intersect(window.offset, window.end(), input.offset, input.end());
  return hi > lo ? Extent{lo, hi - lo} : Extent{window.offset, 0};
}

HaloPlan::HaloPlan(const HaloGeometry& g) : geometry_(g) {
  check_arg(g.length >= 0, kComponent, "input: negative length {}", g.length);
  check_arg(g.ranks >= 1, kComponent, "mesh: need at least one rank, got {}", g.ranks);
  check_arg(g.kernel >= 1, kComponent, "weight: kernel extent must be >= 1, got {}", g.kernel);
  check_arg(g.stride >= 1, kComponent, "stride: must be >= 1, got {}", g.stride);
  check_arg(g.dilation >= 1, kComponent, "dilation: must be >= 1, got {}", g.dilation);
  check_arg(g.pad_left >= 0 && g.pad_right >= 0, kComponent,
            "padding: must be >= 0 on both sides, got ({}, {})", g.pad_left, g.pad_right);
  kernel_extent_ = conv_kernel_extent(g.kernel, g.dilation);
  output_length_ =
      conv_output_length(g.length, g.kernel, g.stride, g.dilation, g.pad_left, g.pad_right);
  check_arg(output_length_ >= 1, kComponent,
            "input: length {} with padding ({}, {}) is shorter than the kernel's extent {}",
            g.length, g.pad_left, g.pad_right, kernel_extent_);

  const std::int64_t L = g.length;
  ranks_.resize(static_cast<std::size_t>(g.ranks));
  for (std::int64_t r = 0; r < g.ranks; ++r) {
    HaloRankPlan& p = ranks_[static_cast<std::size_t>(r)];
    p.rank = r;
    p.input = chunk_extent(L, g.ranks, r);
    p.output = chunk_extent(output_length_, g.ranks, r);
    p.has_output = p.output.length > 0;
    if (!p.has_output) {
      p.window = {p.input.offset, 0};
      continue;
    }
    const std::int64_t o0 = p.output.offset;
    const std::int64_t o1 = p.output.end();
    // Output j reads input j*s - pl ... j*s - pl + E - 1 (DESIGN.md §5).
    const std::int64_t a = o0 * g.stride - g.pad_left;
    const std::int64_t b = (o1 - 1) * g.stride - g.pad_left + kernel_extent_ - 1;
    p.need_first = a;
    p.need_last = b;
    p.window_in_padding = a > L - 1 || b < 0;
    if (p.window_in_padding) {
      p.window = {std::clamp<std::int64_t>(a, 0, L), 0};
      p.pad_left = b - a + 1;
      p.pad_right = 0;
      continue;
    }
    const std::int64_t a_clip = std::max<std::int64_t>(a, 0);
    const std::int64_t b_clip = std::min<std::int64_t>(b, L - 1);
    p.window = {a_clip, b_clip - a_clip + 1};
    p.pad_left = a_clip - a;
    p.pad_right = b - b_clip;
  }

  // Every rank's window meets the owned ranges of a contiguous run of ranks;
  // each overlap with another rank is one transfer. Iterating (receiver, sender)
  // pairs in ascending order gives both lists a deterministic, ascending order.
  for (auto& recv : ranks_) {
    if (recv.window.length == 0) continue;
    for (auto& send : ranks_) {
      if (send.rank == recv.rank) continue;  // own data is copied, never sent
      const auto [lo, hi] =
          intersect(recv.window.offset, recv.window.end(), send.input.offset, send.input.end());
      if (hi <= lo) continue;
      recv.recv.push_back({send.rank, lo, hi});
    }
  }
  for (auto& send : ranks_)
    for (auto& recv : ranks_)
      for (const auto& t : recv.recv)
        if (t.peer == send.rank) send.send.push_back({recv.rank, t.lo, t.hi});
}

const HaloRankPlan& HaloPlan::rank(std::int64_t r) const {
  check_arg(r >= 0 && r < geometry_.ranks, kComponent, "halo plan: rank {} is outside [0, {})", r,
            geometry_.ranks);
  return ranks_[static_cast<std::size_t>(r)];
}

bool HaloPlan::needs_exchange() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const HaloRankPlan& p) { return !p.send.empty(); });
}

std::int64_t HaloPlan::exchanged_elements() const {
  std::int64_t n = 0;
  for (const auto& p : ranks_)
    for (const auto& t : p.send)
      n += t.length();
  return n;
}

std::string HaloPlan::str() const {
  const auto& g = geometry_;
  std::string s = fmt::format("halo plan L={} P={} K={} s={} d={} pad=({}, {}) E={} O={}\n",
                              g.length, g.ranks, g.kernel, g.stride, g.dilation, g.pad_left,
                              g.pad_right, kernel_extent_, output_length_);
  for (const auto& p : ranks_) {
    s += fmt::format("  rank {}: in [{}, {}) out [{}, {})", p.rank, p.input.offset, p.input.end(),
                     p.output.offset, p.output.end());
    if (p.has_output)
      s += fmt::format(" need [{}, {}] window [{}, {}) lp={} rp={}{}", p.need_first, p.need_last,
                       p.window.offset, p.window.end(), p.pad_left, p.pad_right,
                       p.window_in_padding ? " (in padding)" : "");
    for (const auto& t : p.recv)
      s += fmt::format(" recv {}:[{}, {})", t.peer, t.lo, t.hi);
    for (const auto& t : p.send)
      s += fmt::format(" send {}:[{}, {})", t.peer, t.lo, t.hi);
    s += "\n";
  }
  return s;
}

}  // namespace dtensor
