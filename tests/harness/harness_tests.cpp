// Tests of the multi-process harness itself: it must see every rank's
// failure, kill hung ranks at the deadline, and give each job a fresh store.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "tests/support/multiprocess.h"

using dtensor::testing::RankContext;
using dtensor::testing::run_ranks_collect;
using dtensor::testing::RunOptions;

namespace {
RunOptions no_comm() {
  RunOptions o;
  o.init_process_group = false;  // these tests are about processes, not communication
  return o;
}
}  // namespace

TEST_CASE("harness runs each rank in its own process with its rank set", "[harness]") {
  auto res = run_ranks_collect(
      3,
      [](RankContext& ctx) {
        REQUIRE(std::getenv("DTENSOR_RANK") == std::to_string(ctx.rank));
        REQUIRE(ctx.world_size == 3);
        std::printf("pid %d rank %d\n", static_cast<int>(getpid()), ctx.rank);
      },
      no_comm());
  if (dtensor::testing::in_rank_process()) return;
  REQUIRE(res.ranks.size() == 3);
  std::set<std::string> pids;
  for (int r = 0; r < 3; ++r) {
    INFO(res.report());
    REQUIRE(res.ranks[r].ok);
    const auto& out = res.ranks[r].output;
    auto pos = out.find("pid ");
    REQUIRE(pos != std::string::npos);
    REQUIRE(out.find("rank " + std::to_string(r)) != std::string::npos);
    pids.insert(out.substr(pos, out.find(' ', pos + 4) - pos));
  }
  REQUIRE(pids.size() == 3);  // three distinct processes
  REQUIRE(std::to_string(getpid()) != "");
}

TEST_CASE("harness reports a rank whose REQUIRE fails, naming the rank", "[harness]") {
  auto res = run_ranks_collect(
      2, [](RankContext& ctx) { REQUIRE(ctx.rank != 1); }, no_comm());
  if (dtensor::testing::in_rank_process()) return;
  REQUIRE(res.ranks[0].ok);
  REQUIRE_FALSE(res.ranks[1].ok);
  REQUIRE(res.first_failed_rank == 1);
  REQUIRE(res.report().find("rank 1 failed") != std::string::npos);
  REQUIRE(res.report().find("rank 0 failed") == std::string::npos);
}

TEST_CASE("harness reports a rank that crashes with a signal", "[harness]") {
  auto res = run_ranks_collect(
      2,
      [](RankContext& ctx) {
        if (ctx.rank == 0) raise(SIGKILL);
      },
      no_comm());
  if (dtensor::testing::in_rank_process()) return;
  REQUIRE_FALSE(res.ranks[0].ok);
  REQUIRE(res.ranks[0].status.find("signal 9") != std::string::npos);
  REQUIRE(res.ranks[1].ok);
}

TEST_CASE("harness kills a hung rank at the deadline and names it", "[harness]") {
  RunOptions o = no_comm();
  o.deadline = std::chrono::milliseconds(2000);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = run_ranks_collect(
      2,
      [](RankContext& ctx) {
        if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::hours(1));
      },
      o);
  if (dtensor::testing::in_rank_process()) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(res.deadline_passed);
  REQUIRE(res.ranks[0].ok);
  REQUIRE(res.ranks[1].killed_at_deadline);
  REQUIRE(res.report().find("rank 1 failed") != std::string::npos);
  REQUIRE(secs < 10.0);
}

TEST_CASE("harness stops the other ranks after a failure and its grace period", "[harness]") {
  RunOptions o = no_comm();
  o.grace_after_failure = std::chrono::milliseconds(500);
  auto res = run_ranks_collect(
      3,
      [](RankContext& ctx) {
        if (ctx.rank == 2) std::exit(3);
        std::this_thread::sleep_for(std::chrono::hours(1));
      },
      o);
  if (dtensor::testing::in_rank_process()) return;
  REQUIRE(res.first_failed_rank == 2);
  REQUIRE(res.ranks[2].status == "exit code 3");
  REQUIRE(res.ranks[0].stopped_after_failure);
  REQUIRE(res.ranks[1].stopped_after_failure);
  REQUIRE_FALSE(res.deadline_passed);
}

TEST_CASE("harness gives every job its own store and removes it", "[harness]") {
  std::string first, second;
  for (std::string* slot : {&first, &second}) {
    auto res = run_ranks_collect(
        1, [](RankContext&) { std::printf("store=%s\n", std::getenv("DTENSOR_STORE")); },
        no_comm());
    if (dtensor::testing::in_rank_process()) continue;
    const auto& out = res.ranks[0].output;
    auto pos = out.find("store=file:");
    REQUIRE(pos != std::string::npos);
    *slot = out.substr(pos + 11, out.find('\n', pos) - pos - 11);
  }
  if (dtensor::testing::in_rank_process()) return;
  REQUIRE(first != second);
  REQUIRE_FALSE(std::ifstream(first).good());
  REQUIRE(access(first.c_str(), F_OK) != 0);
  REQUIRE(access(second.c_str(), F_OK) != 0);
}
