// Gloo's event-loop thread runs under SCHED_BATCH (so that it does not
// preempt a rank's thread in the middle of posting a message, which made both
// loops spin until a scheduler tick: backends/gloo/event_loop_device.cpp),
// while the threads of the application keep their own policy.
#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

struct Policies {
  int caller = -1;  // the calling thread's
  int batch_threads = 0;
};

Policies thread_policies() {
  Policies p;
  const pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const pid_t tid = static_cast<pid_t>(std::stoi(e->d_name));
    const int policy = sched_getscheduler(tid);
    if (tid == me) p.caller = policy;
    if (policy == SCHED_BATCH) ++p.batch_threads;
  }
  closedir(d);
  return p;
}

}  // namespace

TEST_CASE("Gloo's event loop runs under SCHED_BATCH and the caller keeps its policy P=2",
          "[comm][gloo][mp]") {
  run_ranks(2, [](RankContext&) {
    const Policies p = thread_policies();
    REQUIRE(p.caller == SCHED_OTHER);
    REQUIRE(p.batch_threads >= 1);
    world()->barrier();  // and the group works
  });
}

TEST_CASE("DTENSOR_GLOO_LOOP=normal leaves Gloo's event loop under the normal policy P=2",
          "[comm][gloo][mp]") {
  RunOptions o;
  o.env.emplace("DTENSOR_GLOO_LOOP", "normal");
  run_ranks(
      2,
      [](RankContext&) {
        const Policies p = thread_policies();
        REQUIRE(p.caller == SCHED_OTHER);
        REQUIRE(p.batch_threads == 0);
        world()->barrier();
      },
      o);
}

TEST_CASE("a bad DTENSOR_GLOO_LOOP makes init raise InvalidArgument naming it on every rank P=2",
          "[comm][gloo][errors][mp]") {
  RunOptions o;
  o.init_process_group = false;
  o.env.emplace("DTENSOR_GLOO_LOOP", "fast");
  run_ranks(
      2,
      [](RankContext&) {
        REQUIRE_THROWS_AS(init_process_group(), InvalidArgument);
        try {
          init_process_group();
        } catch (const InvalidArgument& e) {
          REQUIRE_THAT(std::string(e.what()), Catch::Contains("DTENSOR_GLOO_LOOP"));
        }
      },
      o);
}
