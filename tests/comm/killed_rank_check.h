// The check after a job in which one rank killed itself with SIGKILL, shared
// by the fault and the monitor tests.
#pragma once

#include <catch2/catch.hpp>

#include "tests/support/multiprocess.h"

namespace dtensor::testing {

/// Every rank but `dead` must have finished on its own, successfully (each
/// checked its own error), within `prompt_s` of the death.
inline void check_survivors(const JobResult& res, int dead, double prompt_s) {
  INFO(res.report());
  REQUIRE(!res.deadline_passed);
  CHECK_THAT(res.ranks[dead].status, Catch::Contains("signal 9"));
  for (int r = 0; r < static_cast<int>(res.ranks.size()); ++r) {
    if (r == dead) continue;
    INFO("rank " << r << " exited " << res.ranks[r].seconds << " s after start, the dead rank at "
                 << res.ranks[dead].seconds << " s");
    CHECK(res.ranks[r].ok);
    CHECK(res.ranks[r].seconds - res.ranks[dead].seconds < prompt_s);
  }
}

}  // namespace dtensor::testing
