// How long a waiting rank spins before it sleeps (core/detail/wait_spin.h):
// long only where each rank of the host can have a core of its own, as the
// setting says otherwise. An independent table, not the function's own rule,
// with the CPUs given (their reading from cgroups: cpu_budget_tests.cpp).
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
  using Budget = cpu_budget::Budget;
  const auto cores = [](long n) { return Budget{n, n, std::nullopt}; };
  struct Case {
    Vars env;
    int local_ranks;
    Budget cpus;
    long expected_us;
  };
  const std::vector<Case> cases = {
      {{{"OMP_NUM_THREADS", "1"}}, 2, cores(2), 3000},  // two ranks on two cores
      {{{"OMP_NUM_THREADS", "1"}}, 3, cores(2), 50},    // three ranks on two cores
      {{{"OMP_NUM_THREADS", "2"}}, 2, cores(2), 50},    // two threads each on two cores
      {{{"OMP_NUM_THREADS", "2"}}, 2, cores(4), 3000},  // 2 x 2 on four
      {{}, 2, cores(2), 50},                            // OpenMP's default: a thread per core
      {{}, 1, cores(8), 3000},                          // one rank, all cores
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_LOCAL_WORLD_SIZE", "4"}},
       2,
       cores(2),
       50},  // the host's
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_LOCAL_WORLD_SIZE", "2"}}, 1, cores(2), 3000},
      {{{"OMP_NUM_THREADS", "1"}}, 2, Budget{}, 50},  // cores unknown
      // Bound to one core of two (dtensor-run --bind-cores): the host's two
      // still hold both ranks; two threads do not fit the rank's one.
      {{{"OMP_NUM_THREADS", "1"}}, 2, Budget{1, 2, std::nullopt}, 3000},
      {{{"OMP_NUM_THREADS", "2"}}, 2, Budget{1, 2, std::nullopt}, 50},
      {{{"OMP_NUM_THREADS", "2"}},
       1,
       Budget{1, 2, std::nullopt},
       50},  // the host's fit, its own not
      // A container limited to 2 CPUs on a 64-core host.
      {{{"OMP_NUM_THREADS", "1"}}, 4, Budget{64, 64, 2.0}, 50},
      {{{"OMP_NUM_THREADS", "1"}}, 2, Budget{64, 64, 2.0}, 3000},
      {{}, 1, Budget{64, 64, 2.0}, 3000},  // OpenMP's default there: the quota's 2
      {{{"OMP_NUM_THREADS", "1"}}, 4, cores(64), 3000},
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_WAIT_SPIN_US", "7"}}, 2, cores(2), 7},
      {{{"OMP_NUM_THREADS", "8"}, {"DTENSOR_WAIT_SPIN_US", "4000"}}, 2, cores(2), 4000},
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_WAIT_SPIN_US", "0"}}, 2, cores(2), 0},
      {{{"OMP_NUM_THREADS", "1"}, {"DTENSOR_WAIT_SPIN_US", "auto"}}, 2, cores(2), 3000},
  };
  for (const Case& c : cases) {
    INFO("local ranks " << c.local_ranks << ", affinity " << c.cpus.affinity << ", cpuset "
                        << c.cpus.cpuset << ", quota " << c.cpus.quota.value_or(0) << ", expected "
                        << c.expected_us);
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
