// Gloo's event-loop thread runs under SCHED_BATCH (so that it does not
// preempt a rank's thread in the middle of posting a message, which made both
// loops spin until a scheduler tick: backends/gloo/event_loop_device.cpp),
// while the threads of the application keep their own policy; and a group's
// teardown hurries the loop instead of waiting for its idle turns.
#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <string>
#include <thread>
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

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
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

TEST_CASE(
    "a group's connections close without waiting for the idle event loop, which then "
    "idles again P=2",
    "[comm][gloo][mp]") {
  run_ranks(2, [](RankContext& ctx) {
    using namespace std::chrono_literals;
    auto& world = *ctx.pg;
    // Gloo closes a pair only after its loop's next turn, and an idle loop
    // turns every 10 ms: eight subgroups' teardowns took 81 ms. Hurried,
    // they took 17-36 ms (what is left is the group's own threads and
    // shared memory).
    std::chrono::steady_clock::duration closing{};
    for (int i = 0; i < 8; ++i) {
      auto group = world.new_subgroup({0, 1});
      group->barrier();
      const auto start = std::chrono::steady_clock::now();
      group.reset();
      closing += std::chrono::steady_clock::now() - start;
      world.barrier();
    }
    CHECK(closing < 60ms);
    // The world's loop (the same device) is calm again: one left turning
    // would take most of a core while this rank sleeps.
    const double before = process_cpu_seconds();
    std::this_thread::sleep_for(200ms);
    CHECK(process_cpu_seconds() - before < 0.05);
    world.barrier();
  });
}
