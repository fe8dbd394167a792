// Single-process tests: placement spelling, parsing and hashing, and the
// chunk rule on the examples docs/design.md §4 fixes.
#include <catch2/catch.hpp>

#include "dtensor/placement/chunk.h"
#include "dtensor/placement/placement.h"

using namespace dtensor;

TEST_CASE("chunk rule matches torch.chunk: 10 over 4 is 3,3,3,1 and 8 over 5 is 2,2,2,2,0",
          "[placement][chunk]") {
  const std::vector<std::int64_t> a{3, 3, 3, 1}, b{2, 2, 2, 2, 0};
  std::int64_t at = 0;
  for (int r = 0; r < 4; ++r) {
    REQUIRE(chunk_extent(10, 4, r).length == a[r]);
    REQUIRE(chunk_extent(10, 4, r).offset == at);
    at += a[r];
  }
  for (int r = 0; r < 5; ++r)
    REQUIRE(chunk_extent(8, 5, r).length == b[r]);
  REQUIRE(chunk_extent(8, 5, 4).offset == 8);
  // Tiny extents: 1 over 4 leaves three empty ranks; 0 over 3 leaves all empty.
  REQUIRE(chunk_extent(1, 4, 0).length == 1);
  REQUIRE(chunk_extent(1, 4, 3).length == 0);
  REQUIRE(chunk_extent(0, 3, 1).length == 0);
  REQUIRE_THROWS_AS(chunk_extent(4, 0, 0), InvalidArgument);
  REQUIRE_THROWS_AS(chunk_extent(4, 2, 2), InvalidArgument);
}

TEST_CASE("chunk rule tiles 0..L exactly for every L and P up to 40", "[placement][chunk]") {
  for (std::int64_t L = 0; L <= 40; ++L)
    for (std::int64_t P = 1; P <= 12; ++P) {
      std::int64_t next = 0;
      const std::int64_t c = (L + P - 1) / P;
      for (std::int64_t r = 0; r < P; ++r) {
        const Extent e = chunk_extent(L, P, r);
        INFO("L=" << L << " P=" << P << " r=" << r);
        REQUIRE(e.offset == std::min(next, L));
        REQUIRE(e.length >= 0);
        REQUIRE(e.length <= c);
        next = e.end();
      }
      REQUIRE(next == L);
    }
}

TEST_CASE("chunk rule near 2^63 does not overflow", "[placement][chunk]") {
  // Found by the tensor API fuzzer: ceil(L / P) as (L + P - 1) / P, and
  // (r + 1) * c, overflowed for L near INT64_MAX. Expected values by hand.
  constexpr std::int64_t kMax = INT64_MAX;  // 2^63 - 1
  constexpr std::int64_t k62 = std::int64_t{1} << 62;
  REQUIRE(chunk_extent(kMax, 2, 0) == Extent{0, k62});
  REQUIRE(chunk_extent(kMax, 2, 1) == Extent{k62, k62 - 1});
  // c = 2: rank P - 1 starts at min(2 (P - 1), L) = L and owns nothing.
  REQUIRE(chunk_extent(kMax, kMax - 1, 0) == Extent{0, 2});
  REQUIRE(chunk_extent(kMax, kMax - 1, kMax - 2) == Extent{kMax, 0});
  REQUIRE(chunk_extent(kMax, kMax, kMax - 1) == Extent{kMax - 1, 1});
  REQUIRE(chunk_extent(1, kMax, kMax - 1) == Extent{1, 0});
  REQUIRE(chunk_extent(0, kMax, 5) == Extent{0, 0});
}

TEST_CASE("placements print as S(3), R, P(sum) and parse back", "[placement][parse]") {
  REQUIRE(Shard(3).str() == "S(3)");
  REQUIRE(Replicate().str() == "R");
  REQUIRE(Partial().str() == "P(sum)");
  REQUIRE(Partial(ReduceOp::Max).str() == "P(max)");
  const Placements p = parse_placements("S2,S(3),R,P,P(avg),S-1");
  REQUIRE(p.size() == 6);
  REQUIRE(p[0] == Shard(2));
  REQUIRE(p[1] == Shard(3));
  REQUIRE(p[2] == Replicate());
  REQUIRE(p[3] == Partial(ReduceOp::Sum));
  REQUIRE(p[4] == Partial(ReduceOp::Avg));
  REQUIRE(p[5] == Shard(-1));
  REQUIRE(p[5].normalized(4) == Shard(3));
  REQUIRE(placements_str(p) == "S(2),S(3),R,P(sum),P(avg),S(-1)");
  REQUIRE(parse_placements(placements_str(p)) == p);
}

TEST_CASE("placement equality and hashing distinguish dims and reduce ops", "[placement]") {
  REQUIRE(Shard(1) == Shard(1));
  REQUIRE_FALSE(Shard(1) == Shard(2));
  REQUIRE_FALSE(Shard(0) == Replicate());
  REQUIRE_FALSE(Partial(ReduceOp::Sum) == Partial(ReduceOp::Max));
  REQUIRE(Shard(1).hash() == Shard(1).hash());
  REQUIRE(Shard(1).hash() != Shard(2).hash());
  REQUIRE(Partial(ReduceOp::Sum).hash() != Partial(ReduceOp::Min).hash());
  REQUIRE(Replicate().hash() != Shard(0).hash());
}

TEST_CASE("bad placement strings name the parameter", "[placement][parse][errors]") {
  for (const char* bad : {"", "X", "S", "Sx", "P(prod)", "S2,,S3", "S(2", "R2"}) {
    INFO(bad);
    try {
      parse_placements(bad, "--placements");
      FAIL("expected an error");
    } catch (const InvalidArgument& e) {
      REQUIRE(std::string(e.what()).find("--placements") != std::string::npos);
    }
  }
  REQUIRE_THROWS_AS(Shard(4).normalized(4), InvalidArgument);
  REQUIRE_THROWS_AS(Shard(-5).normalized(4), InvalidArgument);
}
