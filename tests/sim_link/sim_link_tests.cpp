// DTENSOR_SIM_LINK, the simulated slow link of the benchmarks: the setting's
// parsing, and on real processes that messages and collectives take at least
// the time the link model says (computed here from the formulas, not by the
// layer), that data still arrives intact and in order, and that a dead peer
// still ends in an error.
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "core/detail/helper_thread.h"
#include "core/detail/simulated_link_process_group.h"
#include "dtensor/core/config.h"
#include "dtensor/core/device_mesh.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/forwarding_process_group.h"
#include "dtensor/placement/bucketed_reduce.h"
#include "dtensor/placement/dtensor.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/killed_rank_check.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace std::chrono_literals;
using Vars = std::map<std::string, std::string>;

namespace {

RunOptions with_link(const std::string& spec) {
  RunOptions opt;
  opt.env["DTENSOR_SIM_LINK"] = spec;
  opt.comm_timeout = 10s;
  opt.deadline = 40s;
  return opt;
}

// Whether a simulated-link layer is somewhere in the stack of `pg`.
bool has_link_layer(const std::shared_ptr<ProcessGroup>& pg) {
  for (auto g = pg; g;) {
    if (std::dynamic_pointer_cast<detail::SimulatedLinkProcessGroup>(g)) return true;
    auto fwd = std::dynamic_pointer_cast<ForwardingProcessGroup>(g);
    g = fwd ? fwd->inner() : nullptr;
  }
  return false;
}

// Runs `fn` (a collective) on every rank of `pg`, started together after a
// barrier, and checks it took at least its `modelled` time and less than
// `below`.
template <typename Fn>
void check_timed(ProcessGroup& pg, const char* what, double modelled, double below, const Fn& fn) {
  pg.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const double s = seconds_since(t0);
  INFO(what << ": " << s << " s, modelled " << modelled << " s, below " << below << " s");
  CHECK(s >= modelled * 0.99);
  CHECK(s < below);
}

// Element i of message k from `src`: unique per message, so a swap shows.
double message_value(int src, int k, std::int64_t i) {
  return src * 1e6 + k * 1e3 + static_cast<double>(i % 997);
}

// A backend stand-in for the layer's in-process tests: two ranks, sends
// recorded with the time they were handed over, and optionally refused.
class RecordingGroup final : public ProcessGroup {
 public:
  struct DoneWork final : Work {
    void wait(std::chrono::milliseconds) override {}
  };
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend_name() const override { return "recording"; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  std::chrono::milliseconds timeout() const override { return 5s; }
  std::shared_ptr<Work> isend(const Tensor& t, int, int tag) override {
    if (refuse) throw CommError("recording", "send refused");
    std::lock_guard lock(mutex);
    sent.push_back(
        {tag, t.item_flat(0), std::chrono::steady_clock::now(), detail::on_helper_thread()});
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> irecv(const Tensor&, int, int) override {
    return std::make_shared<DoneWork>();
  }
  void allreduce(Tensor&, ReduceOp) override {}
  void broadcast(Tensor&, int) override {}
  void allgather(const Tensor&, Tensor&, const std::vector<std::int64_t>&) override {}
  void reduce_scatter(const Tensor&, Tensor&, const std::vector<std::int64_t>&, ReduceOp) override {
  }
  void all_to_all(const Tensor&, const std::vector<std::int64_t>&, Tensor&,
                  const std::vector<std::int64_t>&) override {}
  void barrier() override {}
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>&) override { return nullptr; }
  void abort(const std::string& reason) override { aborted = reason; }

  struct Sent {
    int tag;
    double first;
    std::chrono::steady_clock::time_point at;
    bool from_helper;  // handed over on a thread marked as a helper
  };
  std::mutex mutex;
  std::vector<Sent> sent;
  std::atomic<bool> refuse{false};
  std::string aborted;

 private:
  std::vector<int> ranks_{0, 1};
};

}  // namespace

// ---- the layer alone, around a stand-in backend ----

TEST_CASE("sim link layer: sends handed over in order after latency + bytes / bandwidth",
          "[sim_link]") {
  auto backend = std::make_shared<RecordingGroup>();
  // 2 ms latency; 8 Mbit/s: 1000 bytes take 1 ms on the wire.
  auto pg = detail::SimulatedLinkProcessGroup::wrap(backend, {2000, 0.008});
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 10; ++k)  // 10 x 1000 bytes back to back, alternating tags
    works.push_back(pg->isend(Tensor::full({125}, k, DType::F64), 1, k % 2));
  CHECK(backend->sent.size() < 10);  // not handed over at once
  CHECK_FALSE(detail::on_helper_thread());
  wait_all(works);
  std::lock_guard lock(backend->mutex);
  REQUIRE(backend->sent.size() == 10);
  for (int k = 0; k < 10; ++k) {
    INFO("message " << k);
    CHECK(backend->sent[k].first == k);  // in the order sent
    CHECK(backend->sent[k].tag == k % 2);
    // By the layer's delivery thread, which must not yield its core to the
    // computation before a send (core/detail/helper_thread.h).
    CHECK(backend->sent[k].from_helper);
    // Message k leaves when k earlier ones have left: (k + 1) ms on the
    // wire, then 2 ms of latency.
    const double at = std::chrono::duration<double>(backend->sent[k].at - t0).count();
    CHECK(at >= 0.001 * (k + 1) + 0.002 - 1e-4);
  }
}

TEST_CASE("sim link layer: the backend's failure reaches wait(), abort and destruction never hang",
          "[sim_link]") {
  auto backend = std::make_shared<RecordingGroup>();
  {
    auto pg = detail::SimulatedLinkProcessGroup::wrap(backend, {1000, std::nullopt});
    backend->refuse = true;
    auto w = pg->isend(Tensor::full({4}, 1.0, DType::F32), 1);
    CHECK_THROWS_WITH(w->wait(), Catch::Contains("send refused"));
    backend->refuse = false;
  }
  {
    // 10 s of latency: still on the link when the group is aborted.
    auto pg = detail::SimulatedLinkProcessGroup::wrap(backend, {1e7, std::nullopt});
    auto w = pg->isend(Tensor::full({4}, 1.0, DType::F32), 1, 3);
    const auto t0 = std::chrono::steady_clock::now();
    std::thread([pg] {
      std::this_thread::sleep_for(50ms);
      pg->abort("rank 1 failed: test");
    }).join();
    CHECK_THROWS_AS(w->wait(), CommError);
    CHECK_THROWS_WITH(w->wait(), Catch::Contains("send to rank 1 tag 3") &&
                                     Catch::Contains("rank 1 failed: test"));
    CHECK(seconds_since(t0) < 2.0);
    CHECK(backend->aborted == "rank 1 failed: test");
    // A collective's modelled sleep ends at once after an abort.
    Tensor t = Tensor::full({4}, 1.0, DType::F32);
    const auto t1 = std::chrono::steady_clock::now();
    pg->allreduce(t);
    CHECK(seconds_since(t1) < 2.0);
  }
  {
    // Destroyed with a message still on the link: its wait fails, nothing hangs.
    std::shared_ptr<Work> w;
    const auto t0 = std::chrono::steady_clock::now();
    {
      auto pg = detail::SimulatedLinkProcessGroup::wrap(backend, {1e7, std::nullopt});
      w = pg->isend(Tensor::full({4}, 1.0, DType::F32), 1);
    }
    CHECK_THROWS_AS(w->wait(), CommError);
    CHECK(seconds_since(t0) < 2.0);
  }
  {
    // A wait shorter than the latency times out, naming the message.
    auto pg = detail::SimulatedLinkProcessGroup::wrap(backend, {1e6, std::nullopt});
    auto w = pg->isend(Tensor::full({4}, 1.0, DType::F32), 1, 2);
    CHECK_THROWS_AS(w->wait(100ms), TimeoutError);
    CHECK_THROWS_WITH(w->wait(100ms), Catch::Contains("send to rank 1 tag 2"));
  }
  std::lock_guard lock(backend->mutex);
  CHECK(backend->sent.empty());  // none of those messages reached the backend
}

// ---- the setting ----

TEST_CASE("sim link: DTENSOR_SIM_LINK parses latency and bandwidth", "[sim_link][config]") {
  CHECK_FALSE(Config::from(Vars{}).sim_link);
  CHECK_FALSE(Config::from(Vars{{"DTENSOR_SIM_LINK", ""}}).sim_link);

  const Config both = Config::from(Vars{{"DTENSOR_SIM_LINK", "latency_us=500,gbit=10"}});
  REQUIRE(both.sim_link);
  CHECK(both.sim_link->latency_us == 500);
  REQUIRE(both.sim_link->gbit);
  CHECK(*both.sim_link->gbit == 10);

  const Config swapped = Config::from(Vars{{"DTENSOR_SIM_LINK", "gbit=0.1,latency_us=0"}});
  REQUIRE(swapped.sim_link);
  CHECK(swapped.sim_link->latency_us == 0);
  CHECK(*swapped.sim_link->gbit == Approx(0.1));

  const Config latency_only = Config::from(Vars{{"DTENSOR_SIM_LINK", "latency_us=20000"}});
  REQUIRE(latency_only.sim_link);
  CHECK(latency_only.sim_link->latency_us == 20000);
  CHECK_FALSE(latency_only.sim_link->gbit);  // unlimited

  const Config bandwidth_only = Config::from(Vars{{"DTENSOR_SIM_LINK", "gbit=25"}});
  REQUIRE(bandwidth_only.sim_link);
  CHECK(bandwidth_only.sim_link->latency_us == 0);
  CHECK(*bandwidth_only.sim_link->gbit == 25);

  // Spaces around an item, its key or its value are not part of them.
  const Config spaced = Config::from(Vars{{"DTENSOR_SIM_LINK", "latency_us=500, gbit = 10 "}});
  REQUIRE(spaced.sim_link);
  CHECK(spaced.sim_link->latency_us == 500);
  REQUIRE(spaced.sim_link->gbit);
  CHECK(*spaced.sim_link->gbit == 10);
}

TEST_CASE("sim link: a bad DTENSOR_SIM_LINK is InvalidArgument naming it", "[sim_link][config]") {
  for (const char* bad :
       {"latency_us=-1", "gbit=0", "gbit=-3", "bandwidth=10", "latency_us", "latency_us=abc",
        "latency_us=5x", "gbit=", "garbage", "latency_us=1,,gbit=1", "latency_us=1,",
        "latency_us=1,latency_us=2", "gbit=inf", "latency_us=nan", "latency_us=2e9",
        "latency_us=5 0", "latency_us=1, ", " "}) {
    INFO(bad);
    CHECK_THROWS_AS(Config::from(Vars{{"DTENSOR_SIM_LINK", bad}}), InvalidArgument);
    CHECK_THROWS_WITH(Config::from(Vars{{"DTENSOR_SIM_LINK", bad}}),
                      Catch::Contains("DTENSOR_SIM_LINK='" + std::string(bad) + "'"));
  }
  CHECK_THROWS_WITH(Config::from(Vars{{"DTENSOR_SIM_LINK", "bandwidth=10"}}),
                    Catch::Contains("unknown key 'bandwidth'"));
}

TEST_CASE("sim link: the layer is there only when DTENSOR_SIM_LINK is set, subgroups too",
          "[sim_link]") {
  RunOptions off;
  off.env["DTENSOR_SIM_LINK"] = "";  // empty: off, whatever the caller's environment says
  run_ranks(
      2,
      [](RankContext& ctx) {
        CHECK_FALSE(has_link_layer(ctx.pg));
        CHECK_FALSE(has_link_layer(ctx.pg->new_subgroup({0, 1})));
      },
      off);
  run_ranks(
      2,
      [](RankContext& ctx) {
        CHECK(has_link_layer(ctx.pg));
        CHECK(has_link_layer(ctx.pg->new_subgroup({0, 1})));
        CHECK(has_link_layer(ctx.pg->split_groups({{0}, {1}})));
      },
      with_link("latency_us=1"));
}

// ---- point to point ----

TEST_CASE("sim link: a round trip over a 20 ms link takes at least 40 ms P=2", "[sim_link]") {
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        const int r = ctx.rank, peer = 1 - r;
        for (int round = 0; round < 2; ++round) {  // the first one also connects
          Tensor ping =
              make_tensor(DType::F64, 1000, [&](auto i) { return message_value(0, round, i); });
          Tensor got = Tensor::zeros({1000}, DType::F64);
          const auto t0 = std::chrono::steady_clock::now();
          if (r == 0) {
            pg.isend(ping, peer, 5)->wait();
            pg.irecv(got, peer, 6)->wait();
            const double s = seconds_since(t0);
            INFO("round trip " << s << " s");
            CHECK(s >= 0.040);
            CHECK(s < 2.0);
          } else {
            pg.irecv(got, peer, 5)->wait();
            pg.isend(got, peer, 6)->wait();
          }
          // Rank 1 sent back what it got: rank 0 sees its own message.
          if (r == 0)
            CHECK(max_error(got, [&](auto i) { return message_value(0, round, i); }) == 0);
        }
      },
      with_link("latency_us=20000"));
}

TEST_CASE("sim link: 2 x 4 MB at 0.1 Gbit/s queue on the wire: 0.32 s, then 0.64 s P=2",
          "[sim_link]") {
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        constexpr std::int64_t kFloats = 1'000'000;  // 4 MB: 0.32 s at 0.1 Gbit/s
        pg.barrier();  // connected, no latency configured: costs nothing extra
        const auto t0 = std::chrono::steady_clock::now();
        if (ctx.rank == 0) {
          Tensor a =
              make_tensor(DType::F32, kFloats, [](auto i) { return message_value(0, 0, i); });
          Tensor b =
              make_tensor(DType::F32, kFloats, [](auto i) { return message_value(0, 1, i); });
          auto wa = pg.isend(a, 1, 0);
          auto wb = pg.isend(b, 1, 0);
          // isend does not block the caller.
          CHECK(seconds_since(t0) < 0.2);
          wa->wait();
          const double first = seconds_since(t0);
          wb->wait();
          const double second = seconds_since(t0);
          INFO("first " << first << " s, second " << second << " s");
          CHECK(first >= 0.32);
          CHECK(second >= 0.64);
          CHECK(second < 5.0);
        } else {
          Tensor a = Tensor::zeros({kFloats}, DType::F32), b = Tensor::zeros({kFloats}, DType::F32);
          auto wa = pg.irecv(a, 0, 0);
          auto wb = pg.irecv(b, 0, 0);
          wa->wait();
          wb->wait();
          // Rank 1 started its clock at most a barrier's skew after rank 0.
          const double s = seconds_since(t0);
          INFO("received both after " << s << " s");
          CHECK(s >= 0.55);
          CHECK(max_error(a, [](auto i) { return message_value(0, 0, i); }) == 0);
          CHECK(max_error(b, [](auto i) { return message_value(0, 1, i); }) == 0);
        }
      },
      with_link("gbit=0.1"));
}

TEST_CASE("sim link: many tagged messages both ways arrive intact and in order P=3", "[sim_link]") {
  run_ranks(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        const int r = ctx.rank, P = ctx.world_size;
        constexpr int kMessages = 24;
        // Sizes vary so that a short message queued behind a long one would
        // overtake it if the link did not keep the order.
        const auto count = [](int k) -> std::int64_t { return k % 4 == 0 ? 20000 : 10 + k; };
        for (bool batched : {false, true}) {
          std::vector<Tensor> out, in;
          std::vector<int> in_src, in_k;
          std::vector<P2POp> ops;
          for (int peer = 0; peer < P; ++peer) {
            if (peer == r) continue;
            for (int k = 0; k < kMessages; ++k) {
              in.push_back(Tensor::zeros({count(k)}, DType::F64));
              in_src.push_back(peer);
              in_k.push_back(k);
              ops.push_back(P2POp::recv(in.back(), peer, k % 3));
              out.push_back(make_tensor(DType::F64, count(k),
                                        [&](auto i) { return message_value(r, k, i); }));
              ops.push_back(P2POp::send(out.back(), peer, k % 3));
            }
          }
          std::vector<std::shared_ptr<Work>> works;
          if (batched) {
            works = pg.batch_isend_irecv(ops);
          } else {
            for (const P2POp& op : ops)
              works.push_back(op.kind == P2POp::Kind::Send ? pg.isend(op.tensor, op.peer, op.tag)
                                                           : pg.irecv(op.tensor, op.peer, op.tag));
          }
          wait_all(works);
          for (std::size_t j = 0; j < in.size(); ++j) {
            INFO("batched " << batched << " message " << in_k[j] << " from rank " << in_src[j]);
            CHECK(max_error(in[j], [&](auto i) { return message_value(in_src[j], in_k[j], i); }) ==
                  0);
          }
        }
      },
      with_link("latency_us=2000,gbit=1"));
}

// ---- collectives ----

TEST_CASE("sim link: collectives give right results and take the modelled time P=3", "[sim_link]") {
  // The model with P = 3, L = 10 ms, W = 0.5 Gbit/s (docs/performance.md):
  // allreduce 2(P-1) L + 2(P-1)/P B / W (ring) or L + (P-1) B / W (direct:
  // small), broadcast ceil(log2 P) (L + B / W), allgather (P-1) L + (P-1)/P
  // B / W (ring) or L + (P-1)/P B / W (direct), reduce_scatter (P-1) L +
  // (P-1)/P B / W, all_to_all (P-1) L + max(sent, received) / W, barrier
  // ceil(log2 P) L.
  run_ranks(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        const int r = ctx.rank;
        constexpr int P = 3;
        constexpr double L = 0.010, W = 0.5e9 / 8;  // bytes per second
        const auto timed = [&](const char* what, double modelled, const auto& fn) {
          check_timed(pg, what, modelled, modelled + 3.0, fn);
        };
        pg.barrier();  // connections made before any clock starts

        const std::int64_t n = 250'000;  // 1 MB of f32
        Tensor t = make_tensor(DType::F32, n, [&](auto i) { return small_value(r, i); });
        timed("allreduce", 2 * (P - 1) * L + 2.0 * (P - 1) / P * 4.0 * n / W,
              [&] { pg.allreduce(t); });
        CHECK(max_error(t, [&](auto i) {
                return small_value(0, i) + small_value(1, i) + small_value(2, i);
              }) == 0);

        Tensor s = make_tensor(DType::F32, 100, [&](auto i) { return small_value(r, i); });
        timed("small allreduce", L + (P - 1) * 400.0 / W, [&] { pg.allreduce(s); });
        CHECK(max_error(s, [&](auto i) {
                return small_value(0, i) + small_value(1, i) + small_value(2, i);
              }) == 0);

        Tensor b = make_tensor(DType::F64, 1000, [&](auto i) { return r == 1 ? i * 0.5 : -1.0; });
        timed("broadcast", 2 * (L + 8000.0 / W), [&] { pg.broadcast(b, 1); });
        CHECK(max_error(b, [](auto i) { return i * 0.5; }) == 0);

        // Uneven contributions: rank q gives q + 2 elements.
        const std::vector<std::int64_t> counts = {2, 3, 4};
        Tensor mine = make_tensor(DType::F64, counts[r], [&](auto i) { return 10.0 * r + i; });
        Tensor all = Tensor::zeros({9}, DType::F64);
        timed("allgather", L + (P - 1.0) / P * 72 / W, [&] { pg.allgather(mine, all, counts); });
        CHECK(max_error(all, [](auto i) {
                const int q = i < 2 ? 0 : i < 5 ? 1 : 2;
                const std::int64_t first = q == 0 ? 0 : q == 1 ? 2 : 5;
                return 10.0 * q + (i - first);
              }) == 0);

        Tensor blocks = make_tensor(DType::F64, 9, [&](auto i) { return r + 100.0 * i; });
        Tensor part = Tensor::zeros({counts[r]}, DType::F64);
        timed("reduce_scatter", (P - 1) * L + (P - 1.0) / P * 72 / W,
              [&] { pg.reduce_scatter(blocks, part, counts); });
        const std::int64_t first = r == 0 ? 0 : r == 1 ? 2 : 5;
        CHECK(max_error(part, [&](auto i) { return 3.0 + 3 * 100.0 * (first + i); }) == 0);

        // Each rank sends q + 1 elements to rank q.
        const std::vector<std::int64_t> send = {1, 2, 3};
        const std::vector<std::int64_t> recv(3, r + 1);
        Tensor a_in = make_tensor(DType::F64, 6, [&](auto i) { return 1000.0 * r + i; });
        Tensor a_out = Tensor::zeros({3 * (r + 1)}, DType::F64);
        timed("all_to_all", (P - 1) * L, [&] { pg.all_to_all(a_in, send, a_out, recv); });
        const std::int64_t offset = r == 0 ? 0 : r == 1 ? 1 : 3;  // where block r starts in a_in
        CHECK(max_error(a_out, [&](auto i) {
                const std::int64_t q = i / (r + 1);
                return 1000.0 * q + offset + i % (r + 1);
              }) == 0);

        timed("barrier", 2 * L, [&] { pg.barrier(); });
      },
      with_link("latency_us=10000,gbit=0.5"));
}

TEST_CASE(
    "sim link: halving-doubling and Bruck's take their own modelled time, under the ring's P=8",
    "[sim_link]") {
  // P = 8, L = 20 ms (margin for 8 ranks on 2 cores), W = 0.5 Gbit/s: an allreduce of 1 MB by
  // halving and doubling, 2 log2 P L + 2(P-1)/P B / W, where the ring would take 2(P-1) L + the
  // same; an allgather into 512 KiB by Bruck's, ceil(log2 P) L + (P-1)/P B / W, where the ring
  // would take (P-1) L + the same (core/detail/direct_collectives.h chooses them at these sizes).
  run_ranks(
      8,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        const int r = ctx.rank;
        constexpr int P = 8;
        constexpr double L = 0.020, W = 0.5e9 / 8;  // bytes per second
        pg.barrier();

        const std::int64_t n = 250'000;  // 1 MB of f32
        Tensor t = make_tensor(DType::F32, n, [&](auto i) { return small_value(r, i); });
        const double bytes = 4.0 * n, share = 2.0 * (P - 1) / P;
        // Below the ring's model: 2(P-1) L + the same bytes.
        check_timed(pg, "allreduce", 6 * L + share * bytes / W, 2 * (P - 1) * L + share * bytes / W,
                    [&] { pg.allreduce(t); });
        CHECK(max_error(t, [&](auto i) {
                double sum = 0;
                for (int q = 0; q < P; ++q)
                  sum += small_value(q, i);
                return sum;
              }) == 0);

        const std::int64_t each = 8192;  // f64: 512 KiB in all
        Tensor mine = make_tensor(DType::F64, each, [&](auto i) { return 10.0 * r + i; });
        Tensor all = Tensor::zeros({each * P}, DType::F64);
        const double out = 8.0 * each * P, moved = (P - 1.0) / P * out / W;
        check_timed(pg, "allgather", 3 * L + moved, (P - 1) * L + moved,
                    [&] { pg.allgather(mine, all, std::vector<std::int64_t>(P, each)); });
        CHECK(max_error(all, [&](auto i) { return 10.0 * (i / each) + i % each; }) == 0);
      },
      with_link("latency_us=20000,gbit=0.5"));
}

// ---- the library on top ----

TEST_CASE("sim link: redistribute over the link on 1 rank, 2 ranks and a 2x2 mesh", "[sim_link]") {
  // Uneven shards (5 x 7 over 2 or 2 x 2); the oracle is the global tensor.
  for (int P : {1, 2, 4}) {
    run_ranks(
        P,
        [](RankContext& ctx) {
          const int P = ctx.world_size;
          const Shape mesh_shape = P == 4 ? Shape{2, 2} : Shape{P};
          const DeviceMesh mesh(DeviceType::CPU, mesh_shape);
          for (std::int64_t d = 0; d < mesh.ndim(); ++d)
            CHECK(has_link_layer(mesh.get_group(d)));
          const Tensor G =
              make_tensor(DType::F64, 35, [](auto i) { return 1.5 * i - 7; }).view({5, 7});
          const auto global = [&](std::int64_t i) { return G.item_flat(i); };
          const Placements sharded = P == 4 ? Placements{Shard(0), Shard(1)} : Placements{Shard(0)};
          const Placements swapped = P == 4 ? Placements{Shard(1), Shard(0)} : Placements{Shard(1)};
          const Placements replicated =
              P == 4 ? Placements{Replicate(), Replicate()} : Placements{Replicate()};
          const DTensor x = distribute_tensor(G, mesh, sharded);
          CHECK(max_error(x.redistribute(mesh, replicated).to_local(), global) == 0);
          CHECK(max_error(x.redistribute(mesh, swapped).full_tensor(), global) == 0);
        },
        with_link("latency_us=1000,gbit=1"));
  }
}

TEST_CASE(
    "sim link: a small Partial -> Replicate and a gradient reduction take one latency, their "
    "agreement checks riding with the sums P=2",
    "[sim_link][agreement]") {
  // Over a 30 ms link a blocking check and then the reduction would take 60
  // ms; the sums posted under the call's own tag with the check take 30.
  run_ranks(
      2,
      [](RankContext& ctx) {
        const DeviceMesh mesh(DeviceType::CPU, {2});
        ctx.pg->barrier();  // connected, and both ranks start together
        for (int round = 0; round < 3; ++round) {
          Tensor mine = Tensor::full({8}, 1.0 + ctx.rank, DType::F64);
          const DTensor p = DTensor::from_local(mine, mesh, {Partial()});
          ctx.pg->barrier();
          auto t0 = std::chrono::steady_clock::now();
          const DTensor r = p.redistribute(mesh, {Replicate()});
          double s = seconds_since(t0);
          INFO("redistribute " << s << " s");
          CHECK(s >= 0.029);
          CHECK(s < 0.050);
          CHECK(r.to_local().item_flat(7) == 3.0);

          ctx.pg->barrier();
          t0 = std::chrono::steady_clock::now();
          const auto reduced = reduce_partials({p, p});
          s = seconds_since(t0);
          INFO("reduce_partials " << s << " s");
          CHECK(s >= 0.029);
          CHECK(s < 0.050);
          CHECK(reduced[1].to_local().item_flat(0) == 3.0);
        }
      },
      with_link("latency_us=30000"));
}

// ---- failure ----

TEST_CASE("sim link: a send to a dead peer ends in an error, not a hang P=2", "[sim_link]") {
  RunOptions opt = with_link("latency_us=50000");
  opt.comm_timeout = 10s;
  opt.grace_after_failure = 20s;
  const JobResult res = run_ranks_collect(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        Tensor t = Tensor::full({1 << 16}, 1.0, DType::F32);
        if (ctx.rank == 1) {
          pg.irecv(t, 0)->wait();  // a healthy message first: connections are in use
          raise(SIGKILL);
        }
        pg.isend(t, 1)->wait();
        std::this_thread::sleep_for(300ms);  // rank 1 is dead by now
        const auto t0 = std::chrono::steady_clock::now();
        bool failed = false;
        while (!failed && seconds_since(t0) < 25) {
          try {
            pg.isend(t, 1)->wait();
          } catch (const CommError& e) {
            failed = true;
            std::printf("rank 0: %s after %.2f s\n", e.what(), seconds_since(t0));
          }
        }
        REQUIRE(failed);
      },
      opt);
  if (in_rank_process()) return;
  check_survivors(res, 1, 8.0);
}
