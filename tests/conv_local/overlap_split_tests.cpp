// Where the overlapped forward splits a rank's outputs (ops/conv/
// overlapped_forward.h), checked by brute force over random halo plans: the
// interior outputs read only the rank's own input, and the range is maximal
// (the outputs just outside it read something received).
#include <catch2/catch.hpp>

#include <random>

#include "ops/conv/halo_plan.h"
#include "ops/conv/overlapped_forward.h"

using namespace dtensor;

TEST_CASE("overlap split: interior outputs read only the own part, and no more could",
          "[overlap]") {
  std::mt19937_64 rng(7);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int split_found = 0;
  for (int it = 0; it < 3000; ++it) {
    HaloGeometry g{uni(1, 60), uni(1, 5), uni(1, 5), uni(1, 3), uni(1, 3), uni(0, 3), uni(0, 3)};
    if (g.length + g.pad_left + g.pad_right < g.dilation * (g.kernel - 1) + 1) continue;
    const HaloPlan plan(g);
    const Shape weight{1, 1, g.kernel};
    for (std::int64_t r = 0; r < g.ranks; ++r) {
      const HaloRankPlan& me = plan.rank(r);
      ConvParams p;
      p.stride = {g.stride};
      p.dilation = {g.dilation};
      p.padding = {{me.pad_left, me.pad_right}};
      const std::int64_t out_len = me.output.length;
      const auto in = conv::interior_outputs(me, weight, p, 0, out_len, 0, /*force=*/true);
      if (!in) continue;
      ++split_found;
      INFO(plan.str() << "rank " << r << ": interior [" << in->lo << ", " << in->hi << ")");
      const Extent own = me.own_part();
      const std::int64_t own_lo = own.offset - me.window.offset, own_hi = own_lo + own.length;
      const std::int64_t extent = g.dilation * (g.kernel - 1) + 1;
      auto reads_only_own = [&](std::int64_t o) {
        const std::int64_t first = o * g.stride - me.pad_left;
        return first >= own_lo && first + extent <= own_hi;
      };
      REQUIRE(in->lo < in->hi);
      for (std::int64_t o = in->lo; o < in->hi; ++o)
        CHECK(reads_only_own(o));
      if (in->lo > 0) CHECK_FALSE(reads_only_own(in->lo - 1));
      if (in->hi < out_len) CHECK_FALSE(reads_only_own(in->hi));
      CHECK_FALSE(me.recv.empty());
    }
  }
  CHECK(split_found > 100);  // the sweep exercised the split
}

TEST_CASE("overlap split: not forced, it waits for a large, mostly interior window", "[overlap]") {
  // 512 columns over 2 ranks, 3 taps, padding 1: rank 0's window is 257
  // columns, 256 outputs of which 255 read only its own columns.
  const HaloPlan plan(HaloGeometry{512, 2, 3, 1, 1, 1, 1});
  const HaloRankPlan& me = plan.rank(0);
  ConvParams p;
  p.padding = {{me.pad_left, me.pad_right}};
  const Shape w{64, 64, 3, 3};
  CHECK(conv::interior_outputs(me, w, p, 0, 256, 64 * 512 * 257, false).has_value());
  CHECK_FALSE(conv::interior_outputs(me, w, p, 0, 256, 1000, false).has_value());  // small
  // A thin shard: 8 columns over 2 ranks, 3 taps, padding 1: outputs 1 and 2
  // of rank 0's four read only its own columns.
  const HaloPlan thin(HaloGeometry{8, 2, 3, 1, 1, 1, 1});
  ConvParams q;
  q.padding = {{thin.rank(0).pad_left, thin.rank(0).pad_right}};
  const auto forced = conv::interior_outputs(thin.rank(0), Shape{1, 1, 3}, q, 0, 4, 1 << 20, true);
  REQUIRE(forced.has_value());
  CHECK(forced->lo == 1);
  CHECK(forced->hi == 3);
  CHECK_FALSE(conv::interior_outputs(thin.rank(0), Shape{1, 1, 3}, q, 0, 4, 1 << 20, false));
}
