// The halving-and-doubling allreduce's plans (core/detail/halving_doubling_plan.h),
// run for every rank of a group together in one process: messages go into
// per-pair queues, a step waits for its receive, and a run that stops with
// steps left is a deadlock. Oracles: which ranks' contributions each element
// holds (every rank's exactly once at the end), and float sums whose result
// must be bit-identical on every rank and within rounding of the f64 sum.
// Also the choice between direct, halving-doubling and ring by size.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/detail/direct_collectives.h"
#include "core/detail/halving_doubling_plan.h"
#include "tests/comm/plan_simulator.h"

using namespace dtensor::detail;
using dtensor::testing::run_plans_together;
using dtensor::testing::StepPeers;

namespace {

struct Message {
  std::int64_t lo = 0, hi = 0;
  std::vector<std::uint64_t> owners;  // bit q: rank q's contribution is in it
  std::vector<float> values;
};

struct Outcome {
  bool finished = false;
  std::vector<std::vector<std::uint64_t>> owners;  // per rank, per element
  std::vector<std::vector<float>> values;
  std::vector<std::int64_t> elements_sent;  // per rank
  std::size_t longest = 0;                  // the most steps any rank runs
};

// Runs every rank's plan; values[q][i] is rank q's contribution to element i.
Outcome simulate(int size, std::int64_t n, const std::vector<std::vector<float>>& contributions) {
  Outcome out;
  std::vector<std::vector<HalvingDoublingStep>> plans;
  for (int r = 0; r < size; ++r) {
    plans.push_back(plan_halving_doubling(r, size, n));
    out.longest = std::max(out.longest, plans.back().size());
    out.owners.emplace_back(static_cast<std::size_t>(n), std::uint64_t{1} << r);
    out.values.push_back(contributions[static_cast<std::size_t>(r)]);
  }
  out.elements_sent.assign(static_cast<std::size_t>(size), 0);
  const auto peers = [&](int r, const HalvingDoublingStep& s) {
    REQUIRE(s.peer >= 0);
    REQUIRE(s.peer < size);
    REQUIRE(s.peer != r);
    return StepPeers{s.send_hi > s.send_lo ? s.peer : -1, s.recv_hi > s.recv_lo ? s.peer : -1};
  };
  const auto make = [&](int r, const HalvingDoublingStep& s) {
    Message m{s.send_lo, s.send_hi, {}, {}};
    for (std::int64_t i = s.send_lo; i < s.send_hi; ++i) {
      m.owners.push_back(out.owners[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]);
      m.values.push_back(out.values[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]);
    }
    out.elements_sent[static_cast<std::size_t>(r)] += s.send_hi - s.send_lo;
    return m;
  };
  const auto take = [&](int r, const HalvingDoublingStep& s, const Message& m) {
    // What the peer sent is what this rank expects, element for element.
    REQUIRE(m.lo == s.recv_lo);
    REQUIRE(m.hi == s.recv_hi);
    for (std::int64_t i = m.lo; i < m.hi; ++i) {
      auto& own = out.owners[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      auto& val = out.values[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      const auto k = static_cast<std::size_t>(i - m.lo);
      if (s.combine) {
        REQUIRE((own & m.owners[k]) == 0);  // no contribution counted twice
        own |= m.owners[k];
        val = s.peer_first ? m.values[k] + val : val + m.values[k];
      } else {
        own = m.owners[k];
        val = m.values[k];
      }
    }
  };
  out.finished = run_plans_together<Message>(plans, peers, make, take);
  return out;
}

void check_group(int size, std::int64_t n, std::mt19937& rng) {
  INFO("size " << size << " n " << n);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::vector<std::vector<float>> contributions(static_cast<std::size_t>(size));
  for (auto& c : contributions)
    for (std::int64_t i = 0; i < n; ++i)
      c.push_back(dist(rng));
  const Outcome o = simulate(size, n, contributions);
  REQUIRE(o.finished);  // every step ran, every message was taken: no deadlock
  const std::uint64_t all = size == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << size) - 1;
  for (int r = 0; r < size; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      const auto e = static_cast<std::size_t>(i);
      REQUIRE(o.owners[static_cast<std::size_t>(r)][e] == all);
      // Combined once, copied: every rank holds the same bits.
      REQUIRE(o.values[static_cast<std::size_t>(r)][e] == o.values[0][e]);
    }
  for (std::int64_t i = 0; i < n; ++i) {
    double exact = 0, magnitude = 0;
    for (const auto& c : contributions) {
      exact += c[static_cast<std::size_t>(i)];
      magnitude += std::abs(c[static_cast<std::size_t>(i)]);
    }
    CHECK(std::abs(o.values[0][static_cast<std::size_t>(i)] - exact) <= 1e-6 * size * magnitude);
  }
  if (size > 1) CHECK(static_cast<int>(o.longest) == halving_doubling_rounds(size));
  // Bytes: each rank on the longest path sends at most the model's share
  // (plus a block's rounding per step).
  for (int r = 0; r < size; ++r)
    CHECK(o.elements_sent[static_cast<std::size_t>(r)] <=
          halving_doubling_share(size) * static_cast<double>(n) + 2.0 * o.longest);
}

}  // namespace

TEST_CASE(
    "halving-doubling plans: every group of 1..64 ranks ends with every contribution once, "
    "the same bits everywhere, without deadlock",
    "[comm][collective][plan]") {
  std::mt19937 rng(7);
  for (int size = 1; size <= 64; ++size)
    for (std::int64_t n :
         {std::int64_t{0}, std::int64_t{1}, std::int64_t{3}, static_cast<std::int64_t>(size) - 1,
          static_cast<std::int64_t>(2 * size + 5), std::int64_t{257}})
      if (n >= 0) check_group(size, n, rng);
}

TEST_CASE("halving-doubling plans: power-of-two groups send exactly the ring's bytes",
          "[comm][collective][plan]") {
  std::mt19937 rng(11);
  for (int size : {2, 4, 8, 16, 32}) {
    const std::int64_t n = 1000;
    std::vector<std::vector<float>> c(static_cast<std::size_t>(size),
                                      std::vector<float>(static_cast<std::size_t>(n), 1.0f));
    const Outcome o = simulate(size, n, c);
    REQUIRE(o.finished);
    std::int64_t total = 0;
    for (auto e : o.elements_sent)
      total += e;
    CHECK(total == 2 * (size - 1) * n);  // each element sent P-1 times per phase
  }
}

TEST_CASE("halving-doubling plans: a bad rank or count is refused, naming it",
          "[comm][collective][plan]") {
  CHECK_THROWS_WITH(plan_halving_doubling(3, 3, 10), Catch::Contains("rank 3 of a group of 3"));
  CHECK_THROWS_WITH(plan_halving_doubling(0, 2, -1), Catch::Contains("element count -1"));
}

TEST_CASE(
    "allreduce algorithm: direct while small, halving-doubling from 4 ranks, the ring at "
    "2 and 3 ranks and for large buffers off a power of two",
    "[comm][collective][plan]") {
  using A = AllreduceAlgorithm;
  const std::uint64_t KiB = 1024;
  CHECK(allreduce_algorithm(4, 2) == A::Direct);
  CHECK(allreduce_algorithm(256 * KiB, 2) == A::Direct);
  CHECK(allreduce_algorithm(257 * KiB, 2) == A::Ring);
  CHECK(allreduce_algorithm(200 * KiB, 3) == A::Ring);
  CHECK(allreduce_algorithm(64 * KiB, 4) == A::Direct);
  CHECK(allreduce_algorithm(104 * KiB, 4) == A::HalvingDoubling);  // the U-Net's gradients
  CHECK(allreduce_algorithm(512 * 1024 * KiB, 8) == A::HalvingDoubling);
  CHECK(allreduce_algorithm(70 * KiB, 6) == A::HalvingDoubling);
  CHECK(allreduce_algorithm(1024 * KiB, 5) == A::Ring);
  CHECK(allreduce_algorithm(100, 64) == A::Direct);
  CHECK(allreduce_algorithm(100, 512) == A::Direct);
  // At a thousand ranks the P-1 messages of a direct round cost more than
  // the latencies they save.
  CHECK(allreduce_algorithm(100, 1024) == A::HalvingDoubling);
  CHECK(allreduce_algorithm(104 * KiB, 1024) == A::HalvingDoubling);
  CHECK(allreduce_algorithm(104 * KiB, 1000) == A::HalvingDoubling);
}
