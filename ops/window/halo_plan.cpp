#include "ops/window/halo_plan.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "window";

// [lo, hi) ∩ [lo2, hi2), or an empty range.
std::pair<std::int64_t, std::int64_t> intersect(std::int64_t lo, std::int64_t hi, std::int64_t lo2,
                                                std::int64_t hi2) {
  return {std::max(lo, lo2), std::min(hi, hi2)};
}

// One piece of the window before it is split among owners: window positions
// [dst, dst + count) read source [lo, hi) in `order`.
using Order = WindowRun::Order;
struct Segment {
  std::int64_t lo, hi, dst, count;
  Order order;
};

// The window [w0, w1) (virtual coordinates) as segments of the source, in
// window order: what lies left of 0, inside [0, L), and right of L-1.
std::vector<Segment> segments(std::int64_t w0, std::int64_t w1, std::int64_t L, Boundary b) {
  std::vector<Segment> out;
  auto add = [&](std::int64_t v0, std::int64_t v1, auto&& map) {  // virtual [v0, v1)
    if (v1 > v0) out.push_back(map(v0, v1));
  };
  const std::int64_t left_end = std::min<std::int64_t>(w1, 0);
  const std::int64_t mid0 = std::max<std::int64_t>(w0, 0), mid1 = std::min(w1, L);
  const std::int64_t right0 = std::max(w0, L);
  add(w0, left_end, [&](std::int64_t v0, std::int64_t v1) -> Segment {
    switch (b) {
      case Boundary::Reflect:  // v -> -v, descending
        return {-(v1 - 1), -v0 + 1, v0 - w0, v1 - v0, Order::Reversed};
      case Boundary::Replicate:
        return {0, 1, v0 - w0, v1 - v0, Order::Repeat};
      default:  // circular: v -> v + L
        return {v0 + L, v1 + L, v0 - w0, v1 - v0, Order::Forward};
    }
  });
  add(mid0, mid1, [&](std::int64_t v0, std::int64_t v1) -> Segment {
    return {v0, v1, v0 - w0, v1 - v0, Order::Forward};
  });
  add(right0, w1, [&](std::int64_t v0, std::int64_t v1) -> Segment {
    switch (b) {
      case Boundary::Reflect:  // v -> 2(L-1) - v, descending
        return {2 * (L - 1) - (v1 - 1), 2 * (L - 1) - v0 + 1, v0 - w0, v1 - v0, Order::Reversed};
      case Boundary::Replicate:
        return {L - 1, L, v0 - w0, v1 - v0, Order::Repeat};
      default:
        return {v0 - L, v1 - L, v0 - w0, v1 - v0, Order::Forward};
    }
  });
  return out;
}

}  // namespace

Extent HaloRankPlan::own_part() const {
  const auto [lo, hi] = intersect(window.offset, window.end(), input.offset, input.end());
  return hi > lo ? Extent{lo, hi - lo} : Extent{window.offset, 0};
}

std::vector<HaloTransfer> HaloRankPlan::recv() const {
  std::vector<HaloTransfer> out;
  for (const auto& r : runs)
    if (r.peer != rank) out.push_back({r.peer, r.lo, r.hi});
  return out;
}

std::vector<HaloTransfer> HaloRankPlan::send() const {
  std::vector<HaloTransfer> out;
  for (const auto& r : run_sends)
    out.push_back({r.peer, r.lo, r.hi});
  return out;
}

HaloPlan::HaloPlan(const HaloGeometry& g)
    : HaloPlan(g.length, g.ranks,
               WindowDim::sliding(g.kernel, g.stride, g.dilation, g.pad_left, g.pad_right)) {
  check_arg(g.pad_left >= 0 && g.pad_right >= 0, kComponent,
            "padding: must be >= 0 on both sides, got ({}, {})", g.pad_left, g.pad_right);
}

HaloPlan::HaloPlan(std::int64_t length, std::int64_t ranks, const WindowDim& dim)
    : dim_(dim), length_(length) {
  check_arg(ranks >= 1, kComponent, "mesh: need at least one rank, got {}", ranks);
  output_length_ = dim.output_length_for(length);
  ranks_.resize(static_cast<std::size_t>(ranks));
  build();
}

void HaloPlan::build() {
  const std::int64_t L = length_, P = ranks_count();
  const bool zeros = dim_.boundary == Boundary::Zeros;
  for (std::int64_t r = 0; r < P; ++r) {
    HaloRankPlan& p = ranks_[static_cast<std::size_t>(r)];
    p.rank = r;
    p.input = chunk_extent(L, P, r);
    p.output = chunk_extent(output_length_, P, r);
    p.has_output = p.output.length > 0;
    if (!p.has_output) {
      p.window = {p.input.offset, 0};
      continue;
    }
    const auto [a, b] = dim_.reads(L, p.output.offset, p.output.end());
    p.need_first = a;
    p.need_last = b;
    if (!zeros) {  // the padding is materialised: the whole virtual range
      p.window = {a, b - a + 1};
      continue;
    }
    p.window_in_padding = a > L - 1 || b < 0 || a > b;
    if (p.window_in_padding) {
      p.window = {std::clamp<std::int64_t>(a, 0, L), 0};
      p.pad_left = std::max<std::int64_t>(b - a + 1, 0);
      p.pad_right = 0;
      continue;
    }
    const std::int64_t a_clip = std::max<std::int64_t>(a, 0);
    const std::int64_t b_clip = std::min<std::int64_t>(b, L - 1);
    p.window = {a_clip, b_clip - a_clip + 1};
    p.pad_left = a_clip - a;
    p.pad_right = b - b_clip;
  }

  // The runs of every window, split among the owners of their sources.
  std::vector<Extent> owned;
  for (const auto& p : ranks_)
    owned.push_back(p.input);
  for (auto& recv : ranks_) {
    if (recv.window.length == 0) continue;
    for (const Segment& s : segments(recv.window.offset, recv.window.end(), L, dim_.boundary)) {
      std::vector<WindowRun> pieces;
      for (std::int64_t q = 0; q < P; ++q) {
        const auto [lo, hi] = intersect(s.lo, s.hi, owned[static_cast<std::size_t>(q)].offset,
                                        owned[static_cast<std::size_t>(q)].end());
        if (hi <= lo) continue;
        WindowRun run{q, lo, hi, 0, hi - lo, s.order};
        switch (s.order) {
          case Order::Forward:
            run.dst = s.dst + (lo - s.lo);
            break;
          case Order::Reversed:
            run.dst = s.dst + (s.hi - hi);
            break;
          case Order::Repeat:
            run.dst = s.dst;
            run.count = s.count;
            break;
        }
        pieces.push_back(run);
      }
      std::sort(pieces.begin(), pieces.end(),
                [](const WindowRun& x, const WindowRun& y) { return x.dst < y.dst; });
      recv.runs.insert(recv.runs.end(), pieces.begin(), pieces.end());
    }
  }
  for (auto& send : ranks_)
    for (const auto& recv : ranks_)
      for (WindowRun run : recv.runs)
        if (run.peer == send.rank && recv.rank != send.rank) {
          run.peer = recv.rank;
          send.run_sends.push_back(run);
        }
}

const HaloRankPlan& HaloPlan::rank(std::int64_t r) const {
  DTENSOR_CHECK_ARG(r >= 0 && r < ranks_count(), kComponent,
                    "halo plan: rank {} is outside [0, {})", r, ranks_count());
  return ranks_[static_cast<std::size_t>(r)];
}

bool HaloPlan::needs_exchange() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const HaloRankPlan& p) { return !p.run_sends.empty(); });
}

std::int64_t HaloPlan::exchanged_elements() const {
  std::int64_t n = 0;
  for (const auto& p : ranks_)
    for (const auto& t : p.run_sends)
      n += t.length();
  return n;
}

std::string HaloPlan::str() const {
  std::string s = fmt::format("halo plan L={} P={} {} E={} O={}\n", length_, ranks_count(),
                              dim_.str(), kernel_extent(), output_length_);
  static constexpr const char* kOrder[] = {"", " reversed", " repeat"};
  for (const auto& p : ranks_) {
    s += fmt::format("  rank {}: in [{}, {}) out [{}, {})", p.rank, p.input.offset, p.input.end(),
                     p.output.offset, p.output.end());
    if (p.has_output)
      s += fmt::format(" need [{}, {}] window [{}, {}) lp={} rp={}{}", p.need_first, p.need_last,
                       p.window.offset, p.window.end(), p.pad_left, p.pad_right,
                       p.window_in_padding ? " (in padding)" : "");
    for (const auto& t : p.runs)
      s += fmt::format(" run {}:[{}, {})->{}x{}{}", t.peer, t.lo, t.hi, t.dst, t.count,
                       kOrder[static_cast<int>(t.order)]);
    s += "\n";
  }
  return s;
}

std::shared_ptr<const HaloPlan> shared_halo_plan(std::int64_t length, std::int64_t ranks,
                                                 const WindowDim& dim) {
  // Every field of the call (WindowDim compares field by field): two keys
  // that compare equal give the same plan.
  using Key = std::tuple<std::int64_t, std::int64_t, WindowDim>;
  const Key key{length, ranks, dim};
  // A network has a few dozen distinct windows; a program that keeps making
  // new ones (lengths that change every call) starts the table again.
  constexpr std::size_t kMaxPlans = 1024;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const HaloPlan>> plans;
  {
    std::lock_guard lock(mutex);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
  }
  auto plan = std::make_shared<const HaloPlan>(length, ranks, dim);
  std::lock_guard lock(mutex);
  if (plans.size() >= kMaxPlans) plans.clear();
  return plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace dtensor
