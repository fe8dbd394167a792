// Bruck's allgather's plans (core/detail/bruck_allgather_plan.h), run for
// every rank of a group together in one process: messages go into per-pair
// queues, a round waits for its receive, a run that stops with rounds left
// is a deadlock. Oracle: every rank's rotated buffer ends holding each
// rank's block, element for element, at the plan's offset for it. Also the
// choice between direct, Bruck's and the ring by size.
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/detail/bruck_allgather_plan.h"
#include "core/detail/direct_collectives.h"
#include "tests/comm/plan_simulator.h"

using namespace dtensor::detail;
using dtensor::testing::run_plans_together;
using dtensor::testing::StepPeers;

namespace {

// Element i of rank q's block.
std::int64_t value(int q, std::int64_t i) {
  return q * 1000003 + i;
}

void check_group(const std::vector<std::int64_t>& counts) {
  const int size = static_cast<int>(counts.size());
  INFO("size " << size);
  std::vector<BruckAllgatherPlan> plans;
  std::vector<std::vector<std::int64_t>> buffers;
  for (int r = 0; r < size; ++r) {
    plans.push_back(plan_bruck_allgather(r, counts));
    const auto& off = plans.back().rotated_offset;
    REQUIRE(off.size() == counts.size() + 1);
    buffers.emplace_back(static_cast<std::size_t>(off.back()), -1);
    for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i)
      buffers.back()[static_cast<std::size_t>(off[static_cast<std::size_t>(r)] + i)] = value(r, i);
    REQUIRE(off[static_cast<std::size_t>(r)] == 0);  // its own block leads
    REQUIRE(static_cast<int>(plans.back().rounds.size()) == bruck_rounds(size));
  }
  using Message = std::vector<std::int64_t>;
  std::vector<std::vector<BruckRound>> rounds;
  for (const auto& plan : plans)
    rounds.push_back(plan.rounds);
  const auto peers = [](int, const BruckRound& s) {
    return StepPeers{s.send_hi > s.send_lo ? s.send_to : -1,
                     s.recv_hi > s.recv_lo ? s.recv_from : -1};
  };
  const auto make = [&](int r, const BruckRound& s) {
    const auto& buf = buffers[static_cast<std::size_t>(r)];
    return Message(buf.begin() + s.send_lo, buf.begin() + s.send_hi);
  };
  const auto take = [&](int r, const BruckRound& s, const Message& m) {
    REQUIRE(static_cast<std::int64_t>(m.size()) == s.recv_hi - s.recv_lo);
    for (std::size_t i = 0; i < m.size(); ++i) {
      auto& slot = buffers[static_cast<std::size_t>(r)][static_cast<std::size_t>(s.recv_lo) + i];
      REQUIRE(slot == -1);  // each element arrives once
      slot = m[i];
    }
  };
  // Every round ran and no message was left: no deadlock.
  REQUIRE(run_plans_together<Message>(rounds, peers, make, take));
  for (int r = 0; r < size; ++r) {
    const auto& off = plans[static_cast<std::size_t>(r)].rotated_offset;
    for (int q = 0; q < size; ++q)
      for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i)
        REQUIRE(buffers[static_cast<std::size_t>(r)][static_cast<std::size_t>(
                    off[static_cast<std::size_t>(q)] + i)] == value(q, i));
  }
}

}  // namespace

TEST_CASE(
    "Bruck allgather plans: every group of 1..70 ranks, counts uneven and zero, ends with "
    "every block in place, each element received once, without deadlock",
    "[comm][collective][plan]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> count(0, 6);
  for (int size = 1; size <= 70; ++size) {
    check_group(std::vector<std::int64_t>(static_cast<std::size_t>(size), 3));
    std::vector<std::int64_t> uneven;
    for (int q = 0; q < size; ++q)
      uneven.push_back(count(rng));
    check_group(uneven);
  }
  check_group({0, 0, 0, 0, 0});
}

TEST_CASE("Bruck allgather plans: a bad rank or count is refused, naming it",
          "[comm][collective][plan]") {
  CHECK_THROWS_WITH(plan_bruck_allgather(2, {1, 1}), Catch::Contains("rank 2 of a group of 2"));
  CHECK_THROWS_WITH(plan_bruck_allgather(0, {1, -3}), Catch::Contains("counts[1] = -3"));
}

TEST_CASE(
    "allgather algorithm: direct while small, Bruck's past it from a few ranks and for small "
    "ones at a thousand, the ring at 2 and 3 ranks and for large outputs",
    "[comm][collective][plan]") {
  using A = AllgatherAlgorithm;
  const std::uint64_t KiB = 1024;
  CHECK(allgather_algorithm(384, 2) == A::Direct);
  CHECK(allgather_algorithm(256 * KiB, 4) == A::Direct);
  CHECK(allgather_algorithm(257 * KiB, 2) == A::Ring);
  CHECK(allgather_algorithm(257 * KiB, 3) == A::Ring);
  CHECK(allgather_algorithm(257 * KiB, 8) == A::Bruck);
  CHECK(allgather_algorithm(64 * 1024 * KiB, 4) == A::Ring);  // its copies cost more
  CHECK(allgather_algorithm(192, 32) == A::Direct);
  CHECK(allgather_algorithm(192 * 256, 256) == A::Direct);
  // The norms' statistics at a thousand ranks: P-1 messages cost more than
  // ceil(log2 P) latencies.
  CHECK(allgather_algorithm(192 * 1024, 1024) == A::Bruck);
  CHECK(allgather_algorithm(96 * 1000, 1000) == A::Bruck);
}
