// The rendezvous stores: every call bounded by the timeout (a frozen Redis
// is a TimeoutError naming it), one namespace per job (two jobs on one store
// at once, stale keys of a killed job), Redis AUTH, and the job token (a
// process without it is refused while the job still works).
#include <signal.h>

#include <catch2/catch.hpp>

#include "tests/comm/comm_test_util.h"
#include "tests/comm/redis_server.h"
#include "tests/support/multiprocess.h"
#include "tests/support/scoped_config.h"
#include "tools/launch/process_set.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace std::chrono_literals;

namespace {

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<char>& v) {
  return {v.begin(), v.end()};
}

// Ranks 0..P-1 of the harness's job form jobs of `size` ranks each: job
// j = rank / size, rank in it rank % size, with the given id and token.
// Every job sums its members' rank+1 (times 10^job) and checks the sum, so
// cross-talk between jobs would show in the numbers.
void run_side_by_side(int jobs, int size, const std::string& store,
                      const std::vector<std::string>& ids, const std::vector<std::string>& tokens) {
  RunOptions opt;
  opt.init_process_group = false;
  opt.env["DTENSOR_STORE"] = store;
  for (int r = 0; r < jobs * size; ++r) {
    opt.rank_env[r]["DTENSOR_JOB_ID"] = ids[static_cast<std::size_t>(r / size)];
    opt.rank_env[r]["DTENSOR_JOB_TOKEN"] = tokens[static_cast<std::size_t>(r / size)];
  }
  run_ranks(
      jobs * size,
      [size](RankContext& ctx) {
        const int job = ctx.rank / size;
        InitOptions o;
        o.rank = ctx.rank % size;
        o.world_size = size;
        o.timeout = 15s;
        auto pg = init_process_group(o);
        const double scale = job == 0 ? 1.0 : 10.0;
        Tensor t = Tensor::full({4}, scale * (1 + ctx.rank % size), DType::F64);
        pg->allreduce(t);
        const double want = scale * size * (size + 1) / 2.0;  // independent of the library
        CHECK(max_error(t, [&](auto) { return want; }) == 0);
        destroy_process_group();
      },
      opt);
}

const std::string kTokenA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kTokenB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

}  // namespace

TEST_CASE("store: a frozen Redis is a TimeoutError naming it within the timeout", "[comm][store]") {
  FrozenServer frozen;
  auto t0 = std::chrono::steady_clock::now();
  // Connecting succeeds (the kernel accepts), the first command gets no reply.
  auto store = open_store(frozen.url(), 700ms, "DTENSOR_STORE");
  try {
    store->get("some/key");
    FAIL("expected a TimeoutError");
  } catch (const TimeoutError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(frozen.url()) != std::string::npos);
    CHECK(std::string(e.what()).find("no reply") != std::string::npos);
  }
  CHECK(seconds_since(t0) < 0.7 + 1.0);
  // With a password, AUTH is the first command: open_store itself times out.
  const std::string with_password = "redis://:pw@" + frozen.url().substr(8);
  t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(open_store(with_password, 500ms, "DTENSOR_STORE"), TimeoutError);
  CHECK(seconds_since(t0) < 0.5 + 1.0);
}

TEST_CASE("store: a Redis frozen with SIGSTOP mid-job is a TimeoutError within the timeout",
          "[comm][store][redis]") {
  RedisServer redis;
  auto store = open_store(redis.url(), 600ms, "DTENSOR_STORE");
  store->set("before", bytes("x"));
  CHECK(text(store->get("before")) == "x");
  redis.signal(SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(store->get("before"), TimeoutError);
  CHECK(seconds_since(t0) < 0.6 + 1.0);
  redis.signal(SIGCONT);
  CHECK(text(store->get("before")) == "x");  // connected again once it answers
}

TEST_CASE("store: ranks starting against a frozen Redis all fail naming it, none hangs P=2",
          "[comm][store]") {
  std::unique_ptr<FrozenServer> frozen;
  RunOptions opt;
  opt.init_process_group = false;
  opt.deadline = 30s;
  if (!in_rank_process()) {
    frozen = std::make_unique<FrozenServer>();
    opt.env["DTENSOR_STORE"] = frozen->url();
  }
  run_ranks(
      2,
      [](RankContext&) {
        InitOptions o;
        o.timeout = 1000ms;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          init_process_group(o);
          FAIL("init_process_group returned with a frozen store");
        } catch (const TimeoutError& e) {
          INFO(e.what());
          CHECK(std::string(e.what()).find("[dtensor.store] redis://127.0.0.1:") !=
                std::string::npos);
        }
        CHECK(seconds_since(t0) < 1.0 + 1.5);
        CHECK(!is_initialized());
      },
      opt);
}

TEST_CASE("store: a wait on a missing key ends at the timeout, naming store, job and key",
          "[comm][store]") {
  launch::TempDir dir("dtensor-store-test");
  ScopedConfig job([](Config& c) { c.job_id = "waiting-job"; });
  auto store = open_store("file:" + dir.path(), 5s);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    store->wait({"never/set"}, 300ms);
    FAIL("expected a TimeoutError");
  } catch (const TimeoutError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("file:" + dir.path()) != std::string::npos);
    CHECK(msg.find("waiting-job") != std::string::npos);
    CHECK(msg.find("never/set") != std::string::npos);
  }
  const double s = seconds_since(t0);
  CHECK(s >= 0.29);
  CHECK(s < 0.3 + 1.0);
}

TEST_CASE("store: two jobs on one Redis at once both work P=4", "[comm][store][redis]") {
  std::unique_ptr<RedisServer> redis;
  std::string url;
  if (!in_rank_process()) {
    redis = std::make_unique<RedisServer>();
    url = redis->url();
  }
  run_side_by_side(2, 2, url, {"job-a", "job-b"}, {kTokenA, kTokenB});
}

TEST_CASE("store: two jobs in one store directory at once both work P=4", "[comm][store]") {
  std::unique_ptr<launch::TempDir> dir;
  std::string url;
  if (!in_rank_process()) {
    dir = std::make_unique<launch::TempDir>("dtensor-store-test");
    url = "file:" + dir->path();
  }
  run_side_by_side(2, 2, url, {"job-a", "job-b"}, {kTokenA, kTokenB});
}

TEST_CASE("store: the stale keys of a killed job do not break the next one P=2",
          "[comm][store][redis]") {
  std::unique_ptr<RedisServer> redis;
  RunOptions killed;
  killed.init_process_group = false;
  if (!in_rank_process()) {
    redis = std::make_unique<RedisServer>();
    killed.env["DTENSOR_STORE"] = redis->url();
  }
  // The same job id both times (a reused --job-id), a new token the second
  // time: the hardest case, the keys are the same names.
  killed.env["DTENSOR_JOB_ID"] = "reused";
  killed.env["DTENSOR_JOB_TOKEN"] = kTokenA;
  const JobResult first = run_ranks_collect(
      2,
      [](RankContext& ctx) {
        InitOptions o;
        o.timeout = 10s;
        init_process_group(o);
        if (ctx.rank == 1) raise(SIGKILL);  // dies with its keys in the store
        try {
          Tensor t = Tensor::full({2}, 1.0, DType::F32);
          world()->allreduce(t);
        } catch (const CommError&) {
        }
        std::_Exit(0);
      },
      killed);
  if (!in_rank_process()) REQUIRE_FALSE(first.passed());

  RunOptions next = killed;
  next.env["DTENSOR_JOB_TOKEN"] = kTokenB;
  run_ranks(
      2,
      [](RankContext& ctx) {
        InitOptions o;
        o.timeout = 10s;
        auto pg = init_process_group(o);
        Tensor t = Tensor::full({3}, 1.0 + ctx.rank, DType::F64);
        pg->allreduce(t);
        CHECK(max_error(t, [](auto) { return 3.0; }) == 0);
        destroy_process_group();
      },
      next);
}

TEST_CASE("store: Redis AUTH with a password, a wrong one and none", "[comm][store][redis]") {
  RedisServer redis({"--requirepass", "s3cret pw"});
  const std::string hostport = redis.url().substr(8);  // after "redis://"
  for (const std::string& url :
       {"redis://:s3cret%20pw@" + hostport, "redis://default:s3cret%20pw@" + hostport}) {
    INFO(url);
    auto store = open_store(url, 5s, "DTENSOR_STORE");
    store->set("k", bytes("value"));
    CHECK(text(store->get("k")) == "value");
  }
  try {
    open_store("redis://:wrong@" + hostport, 5s, "DTENSOR_STORE");
    FAIL("expected a CommError");
  } catch (const CommError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("refused the credentials") != std::string::npos);
    CHECK(msg.find("wrong") == std::string::npos);  // the password is never shown
    CHECK(msg.find("redis://:***@" + hostport) != std::string::npos);
  }
  auto anonymous = open_store(redis.url(), 5s, "DTENSOR_STORE");
  CHECK_THROWS_WITH(anonymous->set("k", bytes("v")), Catch::Contains("requires a password"));
  CHECK_THROWS_AS(open_store("rediss://" + hostport, 5s, "DTENSOR_STORE"), NotSupported);
}

TEST_CASE("store: a process without the job token is refused and the job still works P=3",
          "[comm][store][redis]") {
  std::unique_ptr<RedisServer> redis;
  RunOptions opt;
  opt.init_process_group = false;
  if (!in_rank_process()) {
    redis = std::make_unique<RedisServer>();
    opt.env["DTENSOR_STORE"] = redis->url();
  }
  opt.env["DTENSOR_JOB_ID"] = "guarded";
  opt.rank_env[0]["DTENSOR_JOB_TOKEN"] = kTokenA;
  opt.rank_env[1]["DTENSOR_JOB_TOKEN"] = kTokenA;
  // Rank 2 is the intruder: the job's store and id, no token; it claims rank 1.
  run_ranks(
      3,
      [](RankContext& ctx) {
        InitOptions o;
        o.world_size = 2;
        o.rank = ctx.rank == 2 ? 1 : ctx.rank;
        o.timeout = 10s;
        if (ctx.rank == 2) {
          const auto t0 = std::chrono::steady_clock::now();
          try {
            init_process_group(o);
            FAIL("the intruder joined");
          } catch (const CommError& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find("rendezvous refused") != std::string::npos);
            CHECK(std::string(e.what()).find("DTENSOR_JOB_TOKEN") != std::string::npos);
          }
          CHECK(seconds_since(t0) < 8);  // refused, not timed out
          return;
        }
        auto pg = init_process_group(o);
        Tensor t = Tensor::full({5}, 1.0 + ctx.rank, DType::F64);
        pg->allreduce(t);
        CHECK(max_error(t, [](auto) { return 3.0; }) == 0);
        destroy_process_group();
      },
      opt);
}
