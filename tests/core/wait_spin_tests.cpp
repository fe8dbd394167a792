// How long a waiting rank spins before it sleeps (core/detail/wait_spin.h):
// long only where each rank of the host can have a core of its own, as the
// setting says otherwise. An independent table, not the function's own rule.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/detail/wait_spin.h"
#include "dtensor/core/config.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using Vars = std::map<std::string, std::string>;

TEST_CASE("a rank spins long in its waits only with a core of its own", "[config][wait_spin]") {
  using std::chrono::microseconds;
  struct Case {
    Vars env;
    int local_ranks;
    long cpus;
    long expected_us;
  };
  const std::vector<Case> cases = {
      {{{"OMP_NUM_THREADS", "1"}}, 2, 2, 3000},  // two bound ranks on two cores
      {{{"OMP_NUM_THREADS", "1"}}, 3, 2, 50},    // three ranks on two cores
      {{{"OMP_NUM_THREADS", "2"}}, 2, 2, 50},    // two threads each on two cores
      {{{"OMP_NUM_THREADS", "2"}}, 2, 4, 3000},  // 2 x 2 on four
      {{}, 2, 2, 50},                            // OpenMP's default: a thread per core
      {{}, 1, 8, 3000},                          // one rank, all cores
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_LOCAL_WORLD_SIZE", "4"}}, 2, 2, 50},  // the host's
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_LOCAL_WORLD_SIZE", "2"}}, 1, 2, 3000},
      {{{"OMP_NUM_THREADS", "1"}}, 2, 0, 50},  // cores unknown
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_WAIT_SPIN_US", "7"}}, 2, 2, 7},
      {{{"OMP_NUM_THREADS", "8"}, {"DTENSOR_WAIT_SPIN_US", "4000"}}, 2, 2, 4000},
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_WAIT_SPIN_US", "0"}}, 2, 2, 0},
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_WAIT_SPIN_US", "auto"}}, 2, 2, 3000},
  };
  for (const Case& c : cases) {
    INFO("local ranks " << c.local_ranks << ", cpus " << c.cpus << ", expected " << c.expected_us);
    const Config cfg = Config::from(c.env);
    CHECK(detail::wait_spin(cfg, c.local_ranks, c.cpus) == microseconds(c.expected_us));
  }
}

TEST_CASE("ranks reaching each other through shared memory wait with the spin set", "[wait_spin]") {
  dtensor::testing::RunOptions opt;
  opt.env["DTENSOR_WAIT_SPIN_US"] = "1234";
  opt.env["DTENSOR_LOG_LEVEL"] = "debug";
  const auto res = dtensor::testing::run_ranks_collect(
      2, [](dtensor::testing::RankContext& ctx) { ctx.pg->barrier(); }, opt);
  if (dtensor::testing::in_rank_process()) return;
  REQUIRE(res.passed());
  for (const auto& rank : res.ranks) {
    INFO(rank.output);
    CHECK_THAT(rank.output,
               Catch::Contains("through shared memory") && Catch::Contains("waits spin 1234 us"));
  }
}
