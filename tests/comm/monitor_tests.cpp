// The fault monitor (core/detail/fault_monitor.h): when one rank goes wrong
// (it aborts, dies, stops, or calls something else than the others), every
// rank gets an error naming it within seconds, whatever DTENSOR_TIMEOUT is.
// Every test runs with a communication timeout far above its bound, so a
// test passes only if the monitor, not the timeout, ended the wait.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "core/detail/temp_dirs.h"
#include "dtensor/dtensor.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/killed_rank_check.h"
#include "tests/comm/redis_server.h"
#include "tests/support/multiprocess.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace std::chrono_literals;

namespace {

// Rank `victim` stops itself with SIGSTOP; a child process it forks wakes it
// `after` later, so that the job can end (and check what the victim sees).
void stop_for(std::chrono::milliseconds after) {
  const pid_t me = getpid();
  const pid_t waker = fork();
  if (waker == 0) {
    // Only async-signal-safe calls between fork and _exit.
    const struct timespec ts {
      static_cast<time_t>(after.count() / 1000), static_cast<long>(after.count() % 1000) * 1000000
    };
    nanosleep(&ts, nullptr);
    kill(me, SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
  waitpid(waker, nullptr, 0);
}

// A barrier that a stopped rank never joins: it must end with a CommError
// (whose message and time the caller checks), never return.
struct Ended {
  std::string what;
  double seconds = 0;
};
Ended barrier_until_failed(ProcessGroup& pg) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pg.barrier();
  } catch (const CommError& e) {
    std::printf("rank %d: %s after %.2f s\n", pg.rank(), e.what(), seconds_since(t0));
    return {e.what(), seconds_since(t0)};
  }
  FAIL("a barrier with a stopped rank returned");
  return {};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ConvParams conv_params() {
  ConvParams p;
  p.stride = {1, 1};
  p.padding = {{1, 1}, {1, 1}};
  p.dilation = {1, 1};
  return p;
}

}  // namespace

TEST_CASE("monitor: dtensor::abort on one rank fails the others within 2 s P=3",
          "[comm][fault][monitor]") {
  RunOptions opt;
  opt.comm_timeout = 60s;
  opt.deadline = 40s;
  run_ranks(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        pg.barrier();  // healthy first
        if (ctx.rank == 1) {
          std::this_thread::sleep_for(300ms);
          dtensor::abort("the data loader ran out of files");
          // Its own communication fails from now on too.
          CHECK_THROWS_AS(pg.barrier(), CommError);
          return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        try {
          pg.barrier();  // rank 1 never comes
          FAIL("a barrier without rank 1 returned");
        } catch (const CommError& e) {
          const double s = seconds_since(t0);
          INFO(e.what() << " after " << s << " s");
          CHECK_THAT(std::string(e.what()),
                     Catch::Contains("rank 1 failed: the data loader ran out of files"));
          CHECK(s < 0.3 + 2.0);
        }
        // The next call fails at once, with the same cause.
        const auto t1 = std::chrono::steady_clock::now();
        Tensor t = Tensor::full({8}, 1.0, DType::F32);
        CHECK_THROWS_WITH(pg.allreduce(t), Catch::Contains("rank 1 failed"));
        CHECK(seconds_since(t1) < 0.5);
        // And the flight recorder was written, with the barrier still pending
        // or failed (whichever this rank saw first: the monitor's news or the
        // closed connection).
        const std::string file = config().flight_recorder_dir + "/dtensor-flight-rank" +
                                 std::to_string(ctx.rank) + ".txt";
        REQUIRE(std::filesystem::exists(file));
        CHECK_THAT(
            read_text(file),
            Catch::Matches("[^]*\\n[0-9]+ [0-9]+ barrier world all 0 (started|failed) [^]*"));
      },
      opt);
}

TEST_CASE("monitor: an exception out of one rank's operator fails the others within 2 s P=3",
          "[comm][fault][monitor]") {
  RunOptions opt;
  opt.comm_timeout = 60s;
  opt.deadline = 40s;
  run_ranks(
      3,
      [](RankContext& ctx) {
        // Rank 1's convolution handler fails on its own (as a kernel out of
        // memory would); the others wait in the halo exchange for it.
        HandlerOptions options;
        const OpHandler builtin = *current_handler("convolution", &options);
        const int rank = ctx.rank;
        register_op_handler(
            "convolution",
            [builtin, rank](OpCall& call) -> std::vector<DTensor> {
              if (rank == 1) throw std::runtime_error("the kernel ran out of memory");
              return builtin(call);
            },
            /*override_existing=*/true, options);
        DeviceMesh mesh(DeviceType::CPU, {3});
        auto x = distribute_tensor(Tensor::rand({1, 2, 6, 48}, DType::F32, 11), mesh, {Shard(3)});
        auto w = distribute_tensor(Tensor::rand({3, 2, 3, 3}, DType::F32, 12), mesh, {Replicate()});
        const auto t0 = std::chrono::steady_clock::now();
        try {
          convolution(x, w, std::nullopt, conv_params());
          FAIL("a convolution whose rank 1 failed returned");
        } catch (const std::runtime_error& e) {
          const double s = seconds_since(t0);
          INFO(e.what() << " after " << s << " s");
          if (rank == 1) {
            CHECK_THAT(std::string(e.what()), Catch::Equals("the kernel ran out of memory"));
          } else {
            CHECK(dynamic_cast<const CommError*>(&e) != nullptr);
            CHECK_THAT(std::string(e.what()),
                       Catch::Contains("rank 1 failed: the kernel ran out of memory"));
            CHECK(s < 2.0);
          }
        }
      },
      opt);
}

TEST_CASE("monitor: a rank killed with SIGKILL fails ranks not talking to it within 2 s P=3",
          "[comm][fault][monitor]") {
  // Ranks 0 and 1 wait for each other, not for rank 2: no connection of
  // theirs breaks when it dies, so only the monitor can end their wait.
  RunOptions opt;
  opt.comm_timeout = 60s;
  opt.deadline = 40s;
  opt.grace_after_failure = 20s;
  const JobResult res = run_ranks_collect(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        pg.barrier();
        if (ctx.rank == 2) {
          std::this_thread::sleep_for(300ms);
          raise(SIGKILL);
        }
        Tensor t = Tensor::zeros({16}, DType::F32);
        auto w = pg.irecv(t, 1 - ctx.rank);  // nobody sends
        const auto t0 = std::chrono::steady_clock::now();
        try {
          w->wait();
          FAIL("a receive nobody sends returned");
        } catch (const CommError& e) {
          std::printf("rank %d: %s after %.2f s\n", ctx.rank, e.what(), seconds_since(t0));
          CHECK_THAT(std::string(e.what()), Catch::Contains("rank 2 failed"));
          CHECK(seconds_since(t0) < 0.3 + 2.0);
        }
      },
      opt);
  if (in_rank_process()) return;
  check_survivors(res, 2, 2.0);
}

TEST_CASE("monitor: a rank killed with SIGKILL mid-collective fails the others within 2 s P=4",
          "[comm][fault][monitor]") {
  RunOptions opt;
  opt.comm_timeout = 60s;
  opt.deadline = 40s;
  opt.grace_after_failure = 20s;
  const JobResult res = run_ranks_collect(
      4,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        if (ctx.rank == 3) {
          std::thread([] {
            std::this_thread::sleep_for(300ms);
            raise(SIGKILL);
          }).detach();
        }
        Tensor t = Tensor::full({1 << 18}, 1.0, DType::F32);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          while (seconds_since(t0) < 30)
            pg.allreduce(t, ReduceOp::Max);
          FAIL("30 s of allreduce with a dead rank");
        } catch (const CommError& e) {
          std::printf("rank %d: %s after %.2f s\n", ctx.rank, e.what(), seconds_since(t0));
          CHECK_THAT(std::string(e.what()), Catch::Contains("rank 3"));
        }
      },
      opt);
  if (in_rank_process()) return;
  check_survivors(res, 3, 2.0);
}

TEST_CASE("monitor: a stopped rank is named within the heartbeat timeout P=3",
          "[comm][fault][monitor]") {
  RunOptions opt;
  opt.comm_timeout = 60s;
  opt.deadline = 40s;
  opt.env["DTENSOR_HEARTBEAT_INTERVAL"] = "0.2";
  opt.env["DTENSOR_HEARTBEAT_TIMEOUT"] = "2";
  run_ranks(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        pg.barrier();
        if (ctx.rank == 1) {
          stop_for(6000ms);
          // Woken: the job has failed meanwhile, and says so.
          CHECK_THROWS_WITH(pg.barrier(), Catch::Contains("rank 1 failed: no heartbeat"));
          return;
        }
        const Ended e = barrier_until_failed(pg);
        CHECK_THAT(e.what, Catch::Contains("rank 1 failed: no heartbeat"));
        CHECK(e.seconds >= 1.5);
        CHECK(e.seconds < 2.0 + 1.5);
      },
      opt);
}

namespace {

// The store dies (SIGKILL) or freezes (SIGSTOP) mid-job, then rank 1 stops.
// Without the store no rank can be named from its heartbeats; what must not
// happen is that the others wait out their 60 s timeout without a word. They
// must warn within seconds naming the store, and end within the heartbeat
// timeout (2 s) of the loss with an error naming the lost store.
void store_lost_case(int store_signal) {
  std::unique_ptr<RedisServer> redis;
  RunOptions opt;
  opt.comm_timeout = 60s;
  opt.deadline = 40s;
  opt.grace_after_failure = 20s;
  opt.env["DTENSOR_HEARTBEAT_INTERVAL"] = "0.2";
  opt.env["DTENSOR_HEARTBEAT_TIMEOUT"] = "2";
  if (!in_rank_process()) {
    redis = std::make_unique<RedisServer>();
    opt.env["DTENSOR_STORE"] = redis->url();
    opt.env["TEST_REDIS_PID"] = std::to_string(redis->pid());
    opt.env["TEST_REDIS_SIGNAL"] = std::to_string(store_signal);
  }
  const JobResult res = run_ranks_collect(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        pg.barrier();
        std::this_thread::sleep_for(500ms);  // a few healthy heartbeats
        pg.barrier();
        if (ctx.rank == 0)
          REQUIRE(kill(std::stoi(std::getenv("TEST_REDIS_PID")),
                       std::stoi(std::getenv("TEST_REDIS_SIGNAL"))) == 0);
        if (ctx.rank == 1) {
          stop_for(8000ms);
          CHECK_THROWS_AS(pg.barrier(), CommError);
          return;
        }
        const Ended e = barrier_until_failed(pg);
        CHECK_THAT(e.what,
                   Catch::Contains("the store redis://127.0.0.1:") && Catch::Contains("is lost"));
        CHECK(e.seconds < 2.0 + 2.0);
      },
      opt);
  if (in_rank_process()) return;
  if (store_signal == SIGSTOP) redis->signal(SIGCONT);
  for (int r : {0, 2}) {
    INFO("rank " << r << ":\n" << res.ranks[r].output);
    CHECK(res.ranks[r].ok);
    // The warning came first, naming the store and what happens next.
    const std::string& out = res.ranks[r].output;
    const auto warned = out.find("the store " + redis->url() + " does not answer");
    CHECK(warned != std::string::npos);
    CHECK(warned < out.find("is lost"));
  }
}

}  // namespace

TEST_CASE("monitor: a store killed mid-job ends the job naming it within 4 s P=3",
          "[comm][fault][monitor][redis]") {
  store_lost_case(SIGKILL);
}

TEST_CASE("monitor: a store frozen mid-job ends the job naming it within 4 s P=3",
          "[comm][fault][monitor][redis]") {
  store_lost_case(SIGSTOP);
}

TEST_CASE(
    "monitor: a stopped rank is named when DTENSOR_TIMEOUT is below the heartbeat timeout P=3",
    "[comm][fault][monitor]") {
  // The default heartbeat timeout (20 s) is far above the 4 s timeout: were
  // it kept, every rank would only report its own barrier timing out.
  RunOptions opt;
  opt.comm_timeout = 4s;
  opt.deadline = 40s;
  run_ranks(
      3,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        pg.barrier();
        if (ctx.rank == 1) {
          stop_for(8000ms);
          CHECK_THROWS_AS(pg.barrier(), CommError);
          return;
        }
        const Ended e = barrier_until_failed(pg);
        CHECK_THAT(e.what, Catch::Contains("rank 1 failed: no heartbeat"));
        CHECK(e.seconds < 4.0);
      },
      opt);
}

TEST_CASE("monitor: a stopped rank is named within 30 s with the default settings P=2",
          "[comm][fault][monitor][slow]") {
  RunOptions opt;
  opt.comm_timeout = 300s;
  opt.deadline = 60s;
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        pg.barrier();
        if (ctx.rank == 1) {
          stop_for(31000ms);
          CHECK_THROWS_AS(pg.barrier(), CommError);
          return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH(pg.barrier(), Catch::Contains("rank 1 failed: no heartbeat"));
        const double s = seconds_since(t0);
        INFO("after " << s << " s");
        CHECK(s < 30.0);
      },
      opt);
}

TEST_CASE("monitor: heartbeats keep one store key per rank however long the job runs P=2",
          "[comm][monitor]") {
  RunOptions opt;
  opt.env["DTENSOR_HEARTBEAT_INTERVAL"] = "0.05";
  run_ranks(
      2,
      [](RankContext& ctx) {
        ctx.pg->barrier();
        std::this_thread::sleep_for(1500ms);  // some 30 heartbeats per rank
        ctx.pg->barrier();
        const char* store = std::getenv("DTENSOR_STORE");
        REQUIRE(store != nullptr);
        REQUIRE(std::string(store).rfind("file:", 0) == 0);
        // Keys are file names in a directory per job there, '/' written %2F.
        int beat_keys = 0;
        for (const auto& entry :
             std::filesystem::recursive_directory_iterator(std::string(store).substr(5)))
          if (entry.path().filename().string().find("%2Fhb%2F") != std::string::npos) ++beat_keys;
        CHECK(beat_keys == 2);
        ctx.pg->barrier();  // neither rank stops watching before both counted
      },
      opt);
}

TEST_CASE("monitor: a stray unsealed abort key is ignored and logged once P=2", "[comm][monitor]") {
  const JobResult res = run_ranks_collect(
      2,
      [](RankContext& ctx) {
        ctx.pg->barrier();
        if (ctx.rank == 0) {
          // A value written by some other process where the job's abort key
          // lives (file store: DIR/JOB/KEY with '/' as %2F); it lacks the seal.
          const std::string store = std::getenv("DTENSOR_STORE");
          REQUIRE(store.rfind("file:", 0) == 0);
          std::ofstream(store.substr(5) + "/" + config().job_id +
                        "/dtensor.monitor%2Fworld0%2Fabort")
              << "rank 9 failed: not really";
        }
        ctx.pg->barrier();
        std::this_thread::sleep_for(1500ms);  // some 15 monitor ticks
        ctx.pg->barrier();                    // the job goes on
      },
      RunOptions{});
  if (in_rank_process()) return;
  for (const auto& r : res.ranks) {
    INFO(r.output);
    CHECK(r.ok);
    int warnings = 0;
    for (auto at = r.output.find("ignoring key"); at != std::string::npos;
         at = r.output.find("ignoring key", at + 1))
      ++warnings;
    CHECK(warnings == 1);
    CHECK_THAT(r.output, Catch::Contains("abort"));
  }
}

TEST_CASE("monitor: a barrier on one rank, convolution on the others: desync named P=4",
          "[comm][fault][monitor]") {
  // The barrier carries no agreement check for the convolution's to meet:
  // only the desync check can tell the ranks what the others are doing.
  RunOptions opt;
  opt.comm_timeout = 120s;  // the default desync delay must act long before
  opt.deadline = 60s;
  run_ranks(
      4,
      [](RankContext& ctx) {
        DeviceMesh mesh(DeviceType::CPU, {4});
        const Tensor X = Tensor::rand({1, 2, 6, 64}, DType::F32, 11);
        auto x = distribute_tensor(X, mesh, {Shard(3)});
        auto w = distribute_tensor(Tensor::rand({3, 2, 3, 3}, DType::F32, 12), mesh, {Replicate()});
        auto b = distribute_tensor(Tensor::rand({3}, DType::F32, 13), mesh, {Replicate()});
        convolution(x, w, b, conv_params());  // a healthy call first
        const auto t0 = std::chrono::steady_clock::now();
        try {
          if (ctx.rank == 0)
            world()->barrier();
          else
            convolution(x, w, b, conv_params());
          FAIL("diverging calls returned");
        } catch (const CommError& e) {
          const double s = seconds_since(t0);
          const std::string msg = e.what();
          INFO(msg << " after " << s << " s");
          std::printf("rank %d: %s after %.2f s\n", ctx.rank, msg.c_str(), s);
          // Both calls named with their (equal) call numbers.
          CHECK_THAT(msg, Catch::Matches(".*rank 0 is in barrier \\(call ([0-9]+)\\); "
                                         "ranks 1-3 are in convolution \\(call \\1\\).*"));
          CHECK(s < 10.0);
        }
      },
      opt);
}

TEST_CASE(
    "monitor: a rank computing through a long call while the other waits a call ahead is "
    "slow, not a desync P=2",
    "[comm][fault][monitor]") {
  // Rank 0's convolution returns three desync delays late (a long kernel,
  // or a rank slowed by a debugger); rank 1 has its result and waits in the
  // next call, full_tensor. Both have been inside a call for longer than the
  // delay, in different calls, but only rank 1 is blocked on the other: the
  // job must finish, with the right numbers.
  RunOptions opt;
  opt.env["DTENSOR_DESYNC_CHECK_DELAY"] = "0.5";
  opt.deadline = 60s;
  run_ranks(
      2,
      [](RankContext& ctx) {
        HandlerOptions opts;
        const auto builtin = current_handler("convolution", &opts);
        REQUIRE(builtin);
        const bool slow = ctx.rank == 0;
        register_op_handler(
            "convolution",
            [builtin, slow](OpCall& call) {
              auto out = (*builtin)(call);  // its messages are out already
              if (slow) std::this_thread::sleep_for(1500ms);
              return out;
            },
            /*override_existing=*/true, opts);
        DeviceMesh mesh(DeviceType::CPU, {2});
        const Tensor X = Tensor::rand({2, 2, 6, 7}, DType::F64, 21);
        const Tensor W = Tensor::rand({3, 2, 3, 3}, DType::F64, 22);
        const DTensor y =
            convolution(distribute_tensor(X, mesh, {Shard(3)}),
                        distribute_tensor(W, mesh, {Replicate()}), std::nullopt, conv_params());
        const Tensor full = y.full_tensor();
        CHECK(max_abs_diff(full, reference::ref_conv_forward(X, W, Tensor(), conv_params())) <
              1e-12);
        register_op_handler("convolution", *builtin, true, opts);
      },
      opt);
}

TEST_CASE(
    "monitor: full_tensor on one rank, convolution on the others: every rank raises the "
    "disagreement at once P=4",
    "[comm][fault][monitor][agreement]") {
  // Both calls post an agreement check first: each rank meets the other
  // call's fingerprint and raises, long before any desync check.
  RunOptions opt;
  opt.comm_timeout = 120s;
  opt.deadline = 60s;
  run_ranks(
      4,
      [](RankContext& ctx) {
        DeviceMesh mesh(DeviceType::CPU, {4});
        auto x = distribute_tensor(Tensor::rand({1, 2, 6, 64}, DType::F32, 11), mesh, {Shard(3)});
        auto w = distribute_tensor(Tensor::rand({3, 2, 3, 3}, DType::F32, 12), mesh, {Replicate()});
        const auto t0 = std::chrono::steady_clock::now();
        try {
          if (ctx.rank == 0)
            x.full_tensor();
          else
            convolution(x, w, std::nullopt, conv_params());
          FAIL("diverging calls returned");
        } catch (const InvalidArgument& e) {
          INFO(e.what());
          CHECK_THAT(std::string(e.what()),
                     Catch::Contains(ctx.rank == 0 ? "redistribute: ranks disagree"
                                                   : "convolution: ranks disagree"));
          CHECK(seconds_since(t0) < 2.0);
        }
      },
      opt);
}

TEST_CASE("monitor: SIGUSR1 writes each rank's flight recorder P=2", "[comm][monitor]") {
  std::string dir;
  if (!in_rank_process()) {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/dtensor-fr-XXXXXX";
    REQUIRE(mkdtemp(tmpl.data()));
    dir = tmpl;
  }
  RunOptions opt;
  opt.deadline = 30s;
  opt.env["DTENSOR_FLIGHT_RECORDER_DIR"] = dir;
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        Tensor t = Tensor::full({1000}, 1.0, DType::F32);
        for (int i = 0; i < 5; ++i)
          pg.allreduce(t);
        pg.barrier();
        const std::string file = config().flight_recorder_dir + "/dtensor-flight-rank" +
                                 std::to_string(ctx.rank) + ".txt";
        REQUIRE(!std::filesystem::exists(file));
        raise(SIGUSR1);
        const auto t0 = std::chrono::steady_clock::now();
        while (!std::filesystem::exists(file) && seconds_since(t0) < 3)
          std::this_thread::sleep_for(20ms);
        REQUIRE(std::filesystem::exists(file));
        const std::string text = read_text(file);
        INFO(text);
        CHECK_THAT(text, Catch::Contains("rank " + std::to_string(ctx.rank)));
        // The five allreduces of 4000 bytes and the barrier, in order, completed.
        std::istringstream lines(text);
        std::string line;
        int allreduces = 0, barriers = 0;
        while (std::getline(lines, line)) {
          if (line.find(" allreduce world all 4000 completed ") != std::string::npos) ++allreduces;
          if (line.find(" barrier world all 0 completed ") != std::string::npos) ++barriers;
        }
        CHECK(allreduces == 5);
        CHECK(barriers >= 1);
      },
      opt);
  if (in_rank_process()) return;
  std::filesystem::remove_all(dir);
}

TEST_CASE("monitor: a one-rank program writes its recorder on SIGUSR1, its leftovers are swept P=1",
          "[comm][monitor]") {
  RunOptions opt;
  opt.init_process_group = false;
  run_ranks(
      1,
      [](RankContext&) {
        // A program started alone, in a TMPDIR of its own.
        std::string tmpl =
            std::filesystem::temp_directory_path().string() + "/dtensor-solo-test-XXXXXX";
        REQUIRE(mkdtemp(tmpl.data()));
        const std::filesystem::path tmp = tmpl;
        for (const char* v : {"DTENSOR_STORE", "DTENSOR_RANK", "DTENSOR_WORLD_SIZE",
                              "DTENSOR_LOCAL_RANK", "DTENSOR_FLIGHT_RECORDER_DIR"})
          unsetenv(v);
        setenv("TMPDIR", tmp.c_str(), 1);
        // What killed launchers and programs left: owners gone (no such pid;
        // pid 1 with another start time: a reused pid), and one still running.
        const std::string me = std::to_string(getpid()) + " " +
                               temp_dirs::process_start_time(static_cast<long>(getpid()));
        const std::map<std::string, std::string> leftovers = {{"dtensor-run-gone", "999999999 1"},
                                                              {"dtensor-solo-reused", "1 0"},
                                                              {"dtensor-run-alive", me},
                                                              {"dtensor-run-no-record", ""}};
        for (const auto& [name, owner] : leftovers) {
          std::filesystem::create_directories(tmp / name / "store");
          if (!owner.empty()) std::ofstream(tmp / name / "owner") << owner << "\n";
        }
        init_process_group();
        CHECK_FALSE(std::filesystem::exists(tmp / "dtensor-run-gone"));
        CHECK_FALSE(std::filesystem::exists(tmp / "dtensor-solo-reused"));
        CHECK(std::filesystem::exists(tmp / "dtensor-run-alive"));
        CHECK(std::filesystem::exists(tmp / "dtensor-run-no-record"));
        // Its own private store records it as the owner.
        std::filesystem::path solo;
        for (const auto& e : std::filesystem::directory_iterator(tmp))
          if (e.path().filename().string().rfind("dtensor-solo-", 0) == 0) solo = e.path();
        REQUIRE_FALSE(solo.empty());
        CHECK(read_text((solo / "owner").string()) == me + "\n");

        world()->barrier();
        const std::string file = (tmp / "dtensor-flight-rank0.txt").string();
        raise(SIGUSR1);  // the default action would end the process here
        const auto t0 = std::chrono::steady_clock::now();
        while (!std::filesystem::exists(file) && seconds_since(t0) < 3)
          std::this_thread::sleep_for(20ms);
        CHECK(std::filesystem::exists(file));
        destroy_process_group();
        CHECK_FALSE(std::filesystem::exists(solo));
        std::filesystem::remove_all(tmp);
      },
      opt);
}
