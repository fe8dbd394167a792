// Collectives of the Gloo process group on real processes, every dtype and
// reduce op, uneven and empty counts. Expected values come from formulas.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include <catch2/catch.hpp>

#include "core/detail/direct_collectives.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

// The reduction of small_value(s, i) over ranks s = 0..P-1.
double reduce_expected(ReduceOp op, int P, std::int64_t i) {
  double sum = 0, mx = -1e300, mn = 1e300;
  for (int s = 0; s < P; ++s) {
    const double v = small_value(s, i);
    sum += v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case ReduceOp::Sum:
      return sum;
    case ReduceOp::Avg:
      return sum / P;
    case ReduceOp::Max:
      return mx;
    case ReduceOp::Min:
      return mn;
  }
  return 0;
}

// Uneven counts per rank for each group size, with zeros.
std::vector<std::int64_t> uneven_counts(int P) {
  switch (P) {
    case 1:
      return {4};
    case 2:
      return {0, 5};
    case 3:
      return {3, 0, 2};
    default:
      return {2, 7, 0, 1};
  }
}

std::int64_t offset_of(const std::vector<std::int64_t>& counts, int q) {
  return std::accumulate(counts.begin(), counts.begin() + q, std::int64_t{0});
}

// Every rank's value of `x`, via allgather (tested on its own below).
std::vector<double> gather_scalar(ProcessGroup& pg, double x) {
  Tensor in = Tensor::full({1}, x, DType::F64), out = Tensor::zeros({pg.size()}, DType::F64);
  pg.allgather(in, out, std::vector<std::int64_t>(pg.size(), 1));
  std::vector<double> v(pg.size());
  for (int q = 0; q < pg.size(); ++q)
    v[q] = out.item_flat(q);
  return v;
}

}  // namespace

TEST_CASE("allreduce sum avg max min for f32 f64 bf16 f16 P=1..4", "[comm][collective]") {
  for (int P = 1; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      // 1 element, a count no P divides, and one past Gloo's 1 MiB segment.
      for (std::int64_t n : {std::int64_t{1}, std::int64_t{13}, std::int64_t{300007}}) {
        for (DType dt : kAllDTypes) {
          for (ReduceOp op : kAllOps) {
            INFO("n=" << n << " dtype=" << dtype_name(dt) << " op=" << reduce_op_name(op));
            Tensor t = make_tensor(dt, n, [&](auto i) { return small_value(ctx.rank, i); });
            pg.allreduce(t, op);
            double worst = 0, scale = 0;
            for (std::int64_t i = 0; i < n; ++i) {
              const double want = reduce_expected(op, ctx.world_size, i);
              worst = std::max(worst, std::abs(t.item_flat(i) - want));
              scale = std::max(scale, std::abs(want));
            }
            CHECK(worst <= tolerance(dt, scale));
          }
        }
      }
      if (ctx.world_size == 1) CHECK(pg.counters().bytes_sent == 0);
    });
  }
}

TEST_CASE("allreduce traffic: a small one sends P(P-1)N bytes in all, a large one 2(P-1)N P=2..4",
          "[comm][collective][counters]") {
  for (int P = 2; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      const double ranks = ctx.world_size;
      // 5 floats: every rank sends its contribution to every other rank
      // (one round of messages); 400003: a ring reduce-scatter + allgather
      // moves each byte P-1 times per phase.
      for (std::int64_t n : {std::int64_t{5}, std::int64_t{400003}}) {
        Tensor t = Tensor::full({n}, 1.0, DType::F32);
        const auto before = CounterSnapshot::of(pg);
        pg.allreduce(t);
        const auto d = CounterSnapshot::of(pg) - before;
        const auto sent = gather_scalar(pg, static_cast<double>(d.sent));
        const auto received = gather_scalar(pg, static_cast<double>(d.received));
        const double bytes = 4.0 * static_cast<double>(n);
        const double want = n == 5 ? ranks * (ranks - 1) * bytes : 2.0 * (ranks - 1) * bytes;
        CHECK(std::accumulate(sent.begin(), sent.end(), 0.0) == want);
        CHECK(std::accumulate(received.begin(), received.end(), 0.0) == want);
        CHECK(t.item_flat(n - 1) == ranks);
      }
    });
  }
}

TEST_CASE(
    "allreduce by halving and doubling past the direct size P=6..8: every op and dtype, "
    "the same bits on every rank, the ring's bytes at a power of two",
    "[comm][collective]") {
  for (int P : {6, 7, 8}) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      const int ranks = ctx.world_size;
      for (DType dt : kAllDTypes) {
        // 70 KB: past the direct size at these sizes of group, where halving
        // and doubling costs less than the ring (core/detail/direct_collectives.h;
        // 6 and 7 fold their extra ranks first).
        const std::int64_t n = 70000 / static_cast<std::int64_t>(dtype_size(dt));
        REQUIRE(detail::allreduce_algorithm(static_cast<std::uint64_t>(n) * dtype_size(dt),
                                            ranks) == detail::AllreduceAlgorithm::HalvingDoubling);
        for (ReduceOp op : kAllOps) {
          INFO("P=" << ranks << " dtype=" << dtype_name(dt) << " op=" << reduce_op_name(op));
          Tensor t = make_tensor(dt, n, [&](auto i) { return small_value(ctx.rank, i); });
          pg.allreduce(t, op);
          double worst = 0;
          for (std::int64_t i = 0; i < n; ++i)
            worst = std::max(worst, std::abs(t.item_flat(i) - reduce_expected(op, ranks, i)));
          CHECK(worst <= tolerance(dt, 5.0 * ranks));
        }
        // Values that round when summed: every rank still gets the same bits.
        Tensor u =
            make_tensor(dt, n, [&](auto i) { return std::sin(1000.0 * ctx.rank + i) * 100; });
        pg.allreduce(u);
        Tensor all = Tensor::empty({n * ranks}, dt);
        pg.allgather(u, all, std::vector<std::int64_t>(static_cast<std::size_t>(ranks), n));
        for (int q = 1; q < ranks; ++q)
          CHECK(std::memcmp(all.data_ptr(),
                            static_cast<const char*>(all.data_ptr()) + q * u.nbytes(),
                            u.nbytes()) == 0);
        double worst = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          double want = 0;
          for (int q = 0; q < ranks; ++q)
            want += static_cast<double>(
                Tensor::full({1}, std::sin(1000.0 * q + i) * 100, dt).item_flat(0));
          worst = std::max(worst, std::abs(u.item_flat(i) - want));
        }
        CHECK(worst <= tolerance(dt, 100.0 * ranks) * ranks);
      }
      if (ranks == 8) {  // a power of two: each byte crosses P-1 times per phase, as on the ring
        Tensor t = Tensor::full({20000}, 1.0, DType::F32);
        const auto before = CounterSnapshot::of(pg);
        pg.allreduce(t);
        const auto d = CounterSnapshot::of(pg) - before;
        const auto sent = gather_scalar(pg, static_cast<double>(d.sent));
        CHECK(std::accumulate(sent.begin(), sent.end(), 0.0) == 2.0 * (ranks - 1) * 80000);
        CHECK(t.item_flat(19999) == ranks);
      }
    });
  }
}

TEST_CASE("broadcast from every root, every dtype P=1..4", "[comm][collective]") {
  for (int P = 1; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      for (int root = 0; root < ctx.world_size; ++root) {
        for (DType dt : kAllDTypes) {
          INFO("root=" << root << " dtype=" << dtype_name(dt));
          const std::int64_t n = 1000 + root;
          Tensor t = ctx.rank == root
                         ? make_tensor(dt, n, [&](auto i) { return small_value(root, i); })
                         : Tensor::zeros({n}, dt);
          const auto before = CounterSnapshot::of(pg);
          pg.broadcast(t, root);
          CHECK(max_error(t, [&](auto i) { return small_value(root, i); }) == 0);
          const auto d = CounterSnapshot::of(pg) - before;
          // Every rank but the root receives the tensor exactly once.
          CHECK(d.received == (ctx.rank == root ? 0u : t.nbytes()));
        }
      }
    });
  }
}

TEST_CASE("allgather uneven counts including zero, every dtype P=1..4", "[comm][collective]") {
  for (int P = 1; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      const int r = ctx.rank, P = ctx.world_size;
      const auto counts = uneven_counts(P);
      const std::int64_t total = offset_of(counts, P);
      for (DType dt : kAllDTypes) {
        INFO("dtype=" << dtype_name(dt));
        Tensor in = make_tensor(dt, counts[r], [&](auto i) { return small_value(r, i); });
        Tensor out = Tensor::zeros({total}, dt);
        const auto before = CounterSnapshot::of(pg);
        pg.allgather(in, out, counts);
        const auto d = CounterSnapshot::of(pg) - before;
        for (int q = 0; q < P; ++q)
          CHECK(max_error(out.narrow(0, offset_of(counts, q), counts[q]),
                          [&](auto i) { return small_value(q, i); }) == 0);
        // Each rank receives everything but its own block.
        CHECK(d.received == static_cast<std::uint64_t>(total - counts[r]) * dtype_size(dt));
        const auto sent = gather_scalar(pg, static_cast<double>(d.sent));
        const auto recv = gather_scalar(pg, static_cast<double>(d.received));
        CHECK(std::accumulate(sent.begin(), sent.end(), 0.0) ==
              std::accumulate(recv.begin(), recv.end(), 0.0));
      }
      // All counts zero: nothing to do, and nothing hangs.
      Tensor none = Tensor::zeros({0}, DType::F32);
      pg.allgather(none, none, std::vector<std::int64_t>(P, 0));
    });
  }
}

TEST_CASE("allgather past the direct limit (a ring) and at it, uneven, P=3", "[comm][collective]") {
  run_ranks(3, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    const int r = ctx.rank;
    // 256 KiB of f64 in all is the most a rank may receive in one round of
    // direct messages; one element more goes round the ring.
    for (std::int64_t total : {std::int64_t{32768}, std::int64_t{32769}, std::int64_t{300001}}) {
      INFO("total=" << total);
      const std::vector<std::int64_t> counts = {total / 3, total / 3 + 1,
                                                total - 2 * (total / 3) - 1};
      Tensor in = make_tensor(DType::F64, counts[r], [&](auto i) { return small_value(r, i); });
      Tensor out = Tensor::zeros({total}, DType::F64);
      const auto before = CounterSnapshot::of(pg);
      pg.allgather(in, out, counts);
      const auto d = CounterSnapshot::of(pg) - before;
      for (int q = 0; q < 3; ++q)
        CHECK(max_error(out.narrow(0, offset_of(counts, q), counts[q]),
                        [&](auto i) { return small_value(q, i); }) == 0);
      CHECK(d.received == static_cast<std::uint64_t>(total - counts[r]) * 8);
      // Direct: a rank sends its block to each peer; the ring forwards every
      // block but its successor's.
      const bool direct = total * 8 <= 256 * 1024;
      const std::int64_t sent = direct ? 2 * counts[r] : total - counts[(r + 1) % 3];
      CHECK(d.sent == static_cast<std::uint64_t>(sent) * 8);
    }
  });
}

TEST_CASE(
    "allgather by Bruck's algorithm past the direct limit P=6..8: uneven and empty blocks, "
    "in place too, each block received once",
    "[comm][collective]") {
  for (int P : {6, 7, 8}) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      const int r = ctx.rank, ranks = ctx.world_size;
      std::vector<std::int64_t> counts;
      for (int q = 0; q < ranks; ++q)
        counts.push_back(q == 2 ? 0 : 40000 / ranks + 13 * q);  // f64: ~300 KB in all
      const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
      REQUIRE(detail::allgather_algorithm(static_cast<std::uint64_t>(total) * 8, ranks) ==
              detail::AllgatherAlgorithm::Bruck);
      for (bool in_place : {false, true}) {
        INFO("P=" << ranks << " in place " << in_place);
        Tensor out = Tensor::zeros({total}, DType::F64);
        Tensor mine = make_tensor(DType::F64, counts[r], [&](auto i) { return small_value(r, i); });
        Tensor in = mine;
        if (in_place) {
          in = out.narrow(0, offset_of(counts, r), counts[r]);
          in.copy_(mine);
        }
        const auto before = CounterSnapshot::of(pg);
        pg.allgather(in, out, counts);
        const auto d = CounterSnapshot::of(pg) - before;
        for (int q = 0; q < ranks; ++q)
          CHECK(max_error(out.narrow(0, offset_of(counts, q), counts[q]),
                          [&](auto i) { return small_value(q, i); }) == 0);
        CHECK(d.received == static_cast<std::uint64_t>(total - counts[r]) * 8);
        std::int64_t sent = 0;
        for (const auto& round : detail::plan_bruck_allgather(r, counts).rounds)
          sent += round.send_hi - round.send_lo;
        CHECK(d.sent == static_cast<std::uint64_t>(sent) * 8);
      }
    });
  }
}

TEST_CASE("allgather in place (input is this rank's slot of the output) P=3",
          "[comm][collective]") {
  run_ranks(3, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    const std::vector<std::int64_t> counts = {4, 1, 3};
    Tensor out = Tensor::zeros({8}, DType::F64);
    Tensor mine = out.narrow(0, offset_of(counts, ctx.rank), counts[ctx.rank]);
    mine.copy_(
        make_tensor(DType::F64, counts[ctx.rank], [&](auto i) { return 10.0 * ctx.rank + i; }));
    pg.allgather(mine, out, counts);
    for (int q = 0; q < 3; ++q)
      CHECK(max_error(out.narrow(0, offset_of(counts, q), counts[q]),
                      [&](auto i) { return 10.0 * q + i; }) == 0);
  });
}

TEST_CASE("reduce_scatter uneven counts, all reduce ops and dtypes P=1..4", "[comm][collective]") {
  for (int P = 1; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      const int r = ctx.rank, P = ctx.world_size;
      const auto counts = uneven_counts(P);
      const std::int64_t total = offset_of(counts, P);
      const std::int64_t off = offset_of(counts, r);
      for (DType dt : kAllDTypes) {
        for (ReduceOp op : kAllOps) {
          INFO("dtype=" << dtype_name(dt) << " op=" << reduce_op_name(op));
          Tensor in = make_tensor(dt, total, [&](auto i) { return small_value(r, i); });
          Tensor out = Tensor::zeros({counts[r]}, dt);
          const auto before = CounterSnapshot::of(pg);
          pg.reduce_scatter(in, out, counts, op);
          const auto d = CounterSnapshot::of(pg) - before;
          double worst = 0;
          for (std::int64_t j = 0; j < counts[r]; ++j)
            worst = std::max(worst, std::abs(out.item_flat(j) - reduce_expected(op, P, off + j)));
          CHECK(worst <= tolerance(dt, 40));
          // Each rank sends every block but its own, once: (P-1)/P of the data.
          CHECK(d.sent == static_cast<std::uint64_t>(total - counts[r]) * dtype_size(dt));
          CHECK(d.received == static_cast<std::uint64_t>((P - 1) * counts[r]) * dtype_size(dt));
        }
      }
    });
  }
}

TEST_CASE("all_to_all uneven counts including zero, every dtype P=1..4", "[comm][collective]") {
  for (int P = 1; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      auto& pg = *ctx.pg;
      const int r = ctx.rank, P = ctx.world_size;
      // Rank s sends (s + 2d) % 3 elements to rank d: zeros included.
      auto count = [](int s, int d) { return std::int64_t{(s + 2 * d) % 3}; };
      auto value = [](int s, int d, std::int64_t j) { return s * 10.0 + d + j * 0.5; };
      std::vector<std::int64_t> send(P), recv(P);
      for (int q = 0; q < P; ++q) {
        send[q] = count(r, q);
        recv[q] = count(q, r);
      }
      for (DType dt : kAllDTypes) {
        INFO("dtype=" << dtype_name(dt));
        Tensor in = Tensor::zeros({offset_of(send, P)}, dt);
        for (int q = 0; q < P; ++q)
          in.narrow(0, offset_of(send, q), send[q]).copy_(make_tensor(dt, send[q], [&](auto j) {
            return value(r, q, j);
          }));
        Tensor out = Tensor::full({offset_of(recv, P)}, -1.0, dt);
        const auto before = CounterSnapshot::of(pg);
        pg.all_to_all(in, send, out, recv);
        const auto d = CounterSnapshot::of(pg) - before;
        for (int q = 0; q < P; ++q)
          CHECK(max_error(out.narrow(0, offset_of(recv, q), recv[q]),
                          [&](auto j) { return value(q, r, j); }) == 0);
        CHECK(d.sent == static_cast<std::uint64_t>(offset_of(send, P) - send[r]) * dtype_size(dt));
        CHECK(d.received ==
              static_cast<std::uint64_t>(offset_of(recv, P) - recv[r]) * dtype_size(dt));
      }
    });
  }
}

TEST_CASE("barrier holds every rank until the last arrives P=3", "[comm][collective]") {
  run_ranks(3, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    pg.barrier();  // line up first
    const auto t0 = std::chrono::steady_clock::now();
    if (ctx.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    pg.barrier();
    CHECK(seconds_since(t0) >= 0.35);
  });
}

TEST_CASE("collectives reject bad arguments naming the parameter P=2",
          "[comm][collective][validation]") {
  run_ranks(2, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    const int r = ctx.rank;
    auto message_of = [](auto&& fn) {
      try {
        fn();
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("(no InvalidArgument)");
    };
    Tensor in = Tensor::zeros({2}, DType::F32), out = Tensor::zeros({4}, DType::F32);
    Tensor out64 = Tensor::zeros({4}, DType::F64);
    // Right for `in` on this rank, wrong for `out`.
    const std::vector<std::int64_t> wrong_total = {r == 0 ? 2 : 3, r == 0 ? 3 : 2};
    CHECK_THAT(message_of([&] { pg.allgather(in, out, {2}); }),
               Catch::Contains("counts has 1 entries"));
    CHECK_THAT(message_of([&] {
                 pg.allgather(in, out, {3, 1});
               }),
               Catch::Contains("in has 2 elements"));
    CHECK_THAT(message_of([&] { pg.allgather(in, out, wrong_total); }),
               Catch::Contains("out has 4 elements"));
    CHECK_THAT(message_of([&] {
                 pg.allgather(in, out, {-1, 5});
               }),
               Catch::Contains("counts[0]=-1"));
    CHECK_THAT(message_of([&] {
                 pg.allgather(in, out64, {2, 2});
               }),
               Catch::Contains("out is f64 but in is f32"));
    CHECK_THAT(message_of([&] { pg.broadcast(in, 2); }), Catch::Contains("root=2"));
    CHECK_THAT(message_of([&] {
                 pg.reduce_scatter(out, in, {1, 3});
               }),
               Catch::Contains("out has 2 elements"));
    CHECK_THAT(message_of([&] {
                 pg.all_to_all(out, {2, 2}, out64, {2, 2});
               }),
               Catch::Contains("out is f64"));
    std::vector<std::int64_t> send = {2, 2}, recv = {2, 2};
    recv[r] = 1;
    recv[1 - r] = 3;
    CHECK_THAT(message_of([&] { pg.all_to_all(out, send, out, recv); }),
               Catch::Contains("send_counts"));
    Tensor strided = Tensor::zeros({4, 4}, DType::F32).narrow(1, 1, 2);
    CHECK_THAT(message_of([&] { pg.allreduce(strided); }), Catch::Contains("contiguous"));
    // Validation happens before any data moves: the group is still in step.
    Tensor x = Tensor::full({2}, 1.0 + r, DType::F64);
    pg.allreduce(x, ReduceOp::Max);
    CHECK(max_error(x, [](auto) { return 2.0; }) == 0);
  });
}
