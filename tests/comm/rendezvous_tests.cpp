// Rendezvous: through a real redis-server, binding options, and a rank that
// never arrives.
#include <thread>

#include <catch2/catch.hpp>

#include "tests/comm/comm_test_util.h"
#include "tests/comm/redis_server.h"
#include "tests/support/multiprocess.h"
#include "tools/launch/process_set.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace std::chrono_literals;

TEST_CASE("rendezvous through redis-server: world, subgroup and P2P P=3", "[comm][rendezvous]") {
  std::unique_ptr<RedisServer> redis;
  RunOptions opt;
  if (!in_rank_process()) {  // the ranks only need its address
    redis = std::make_unique<RedisServer>();
    opt.env["DTENSOR_STORE"] = redis->url();
  }
  run_ranks(
      3,
      [](RankContext& ctx) {
        REQUIRE(std::string(std::getenv("DTENSOR_STORE")).rfind("redis://", 0) == 0);
        auto& pg = *ctx.pg;
        Tensor t = Tensor::full({10}, 1.0 + ctx.rank, DType::F32);
        pg.allreduce(t);
        CHECK(max_error(t, [](auto) { return 6.0; }) == 0);
        if (ctx.rank != 1) {
          auto ends = pg.new_subgroup({0, 2});
          Tensor mine = Tensor::full({4}, 1.0 * ctx.rank, DType::F64),
                 theirs = Tensor::zeros({4}, DType::F64);
          const int peer = 1 - ends->rank();
          auto w = ends->batch_isend_irecv({P2POp::send(mine, peer), P2POp::recv(theirs, peer)});
          wait_all(w);
          CHECK(max_error(theirs, [&](auto) { return 2.0 - ctx.rank; }) == 0);
        }
        pg.barrier();
      },
      opt);
}

TEST_CASE("a rank that never joins makes init fail with TimeoutError P=2",
          "[comm][rendezvous][fault]") {
  RunOptions opt;
  opt.init_process_group = false;
  opt.deadline = 30s;
  run_ranks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank == 1) return;  // never shows up
        InitOptions o;
        o.timeout = 1500ms;
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_THROWS_AS(init_process_group(o), TimeoutError);
        const double s = seconds_since(t0);
        CHECK(s >= 1.3);
        CHECK(s < 1.5 + 3.0);
        CHECK(!is_initialized());
      },
      opt);
}

TEST_CASE("binding: explicit loopback hostname works, an unknown interface is InvalidArgument P=2",
          "[comm][rendezvous]") {
  RunOptions opt;
  opt.env["DTENSOR_HOSTNAME"] = "127.0.0.1";
  run_ranks(
      2,
      [](RankContext& ctx) {
        Tensor t = Tensor::full({3}, 2.0, DType::F64);
        ctx.pg->allreduce(t, ReduceOp::Avg);
        CHECK(max_error(t, [](auto) { return 2.0; }) == 0);
      },
      opt);
  RunOptions bad;
  bad.init_process_group = false;
  run_ranks(
      2,
      [](RankContext&) {
        InitOptions o;
        o.iface = "dtensor-no-such-if0";
        CHECK_THROWS_WITH(init_process_group(o), Catch::Contains("dtensor-no-such-if0"));
        CHECK(!is_initialized());
      },
      bad);
}
