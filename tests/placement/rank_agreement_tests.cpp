// The posted agreement check (PendingAgreement): every rank throws the same
// error or none does, a second confirm() repeats the outcome without waiting,
// and the blocking form still pairs with itself.
#include <catch2/catch.hpp>
#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/placement/rank_agreement.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

TEST_CASE(
    "a posted agreement check passes when every rank agrees and fails on all when one "
    "differs P=3",
    "[agreement][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    auto group = world();
    PendingAgreement same(group, 12345, "same", "same");
    same.confirm();
    REQUIRE(same.settled());
    same.confirm();  // a second confirm returns at once

    // Rank 2 differs in one 21-bit piece only (the last one).
    const std::size_t mine = ctx.rank == 2 ? (std::size_t{1} << 50) | 7 : std::size_t{7};
    PendingAgreement differ(group, mine, "my_op", "description");
    for (int attempt = 0; attempt < 2; ++attempt) {  // the second rethrows the same
      try {
        differ.confirm();
        FAIL("expected a disagreement error");
      } catch (const InvalidArgument& e) {
        REQUIRE(std::string(e.what()).find("my_op: ranks disagree") != std::string::npos);
      }
    }
    // Posted checks and the blocking one do not cross: each pairs with itself.
    PendingAgreement a(group, 1, "a", "a");
    check_ranks_agree(*group, 2, "b", "b");
    a.confirm();
    PendingAgreement nothing;  // confirms nothing
    nothing.confirm();
    REQUIRE(nothing.settled());
  });
}

TEST_CASE("a posted agreement check with DTENSOR_DEBUG=1 lists every rank's description P=2",
          "[agreement][mp]") {
  RunOptions o;
  o.env.emplace("DTENSOR_DEBUG", "1");
  run_ranks(
      2,
      [](RankContext& ctx) {
        PendingAgreement p(world(), 1, "my_op", ctx.rank == 0 ? "asked A" : "asked B");
        try {
          p.confirm();
          FAIL("expected a disagreement error");
        } catch (const InvalidArgument& e) {
          const std::string m = e.what();
          REQUIRE(m.find("rank 0: asked A") != std::string::npos);
          REQUIRE(m.find("rank 1: asked B") != std::string::npos);
        }
      },
      o);
}

TEST_CASE(
    "with DTENSOR_DEBUG=1 ranks whose fingerprints differ disagree even when their descriptions "
    "read the same P=2",
    "[agreement][mp]") {
  RunOptions o;
  o.env.emplace("DTENSOR_DEBUG", "1");
  run_ranks(
      2,
      [](RankContext& ctx) {
        for (const bool posted : {false, true}) {
          INFO((posted ? "posted" : "blocking") << " form");
          const std::size_t mine = ctx.rank == 0 ? 11 : 12;
          try {
            if (posted)
              PendingAgreement(world(), mine, "my_op", "the same words").confirm();
            else
              check_ranks_agree(*world(), mine, "my_op", "the same words");
            FAIL("expected a disagreement error");
          } catch (const InvalidArgument& e) {
            REQUIRE(std::string(e.what()).find("my_op: ranks disagree") != std::string::npos);
          }
        }
      },
      o);
}
