// End-to-end tests of dtensor-conv: the real binary under the real launcher
// (dtensor-run), checked through its exit status, its --json line, and the
// files of --dump (and, when PyTorch is importable, tools/check_dump.py).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtensor/cuda.h"
#include "tests/cli/mini_json.h"
#include "tests/cli/run_program.h"
#include "tools/launch/process_set.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Args = std::vector<std::string>;
namespace json = dtensor::testing::json;

const std::string kRun = DTENSOR_RUN_PATH;
const std::string kConv = DTENSOR_CONV_PATH;
const std::string kCheckDump = DTENSOR_CHECK_DUMP_PATH;

using dtensor::testing::cli_run::Ran;
using dtensor::testing::cli_run::read_file;
using dtensor::testing::cli_run::run_program;

// dtensor-run -n P -- dtensor-conv ARGS, with a communication timeout and a
// deadline so that a hang fails quickly instead of stalling the suite.
Ran run_conv(int ranks, const Args& args) {
  Args argv{kRun, "-n", std::to_string(ranks), "--timeout", "20", "--deadline", "50", "--", kConv};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

// The last line rank 0 printed (dtensor-run prefixes rank 0's lines "[0] "),
// parsed as JSON.
json::Value last_json_line(const std::string& output) {
  std::istringstream in(output);
  std::string line, last;
  while (std::getline(in, line))
    if (line.rfind("[0] ", 0) == 0) last = line.substr(4);
  INFO("rank 0's last line: " << last);
  return json::parse(last);
}

const std::vector<std::string> kJsonFields = {"ok",
                                              "max_abs_err",
                                              "fwd_ms",
                                              "bwd_ms",
                                              "local_fwd_ms",
                                              "local_bwd_ms",
                                              "overhead_fwd",
                                              "overhead_bwd",
                                              "gflops_fwd",
                                              "gflops_bwd",
                                              "halo_bytes_sent_per_rank",
                                              "peak_rss_mb",
                                              "rss_ratio",
                                              "rss_ratio_net",
                                              "rss_ratio_private"};

// Runs a --check --backward --json configuration and requires a pass.
json::Value check_passes(int ranks, Args args) {
  for (const char* a : {"--check", "--backward", "--json"})
    args.push_back(a);
  const Ran r = run_conv(ranks, args);
  INFO("output:\n" << r.output);
  REQUIRE(r.code == 0);
  const json::Value v = last_json_line(r.output);
  for (const auto& f : kJsonFields)
    CHECK(v.has(f));
  CHECK(v.at("ok").boolean);
  const bool bias = std::find(args.begin(), args.end(), "--no-bias") == args.end();
  for (const char* t : {"output", "grad_input", "grad_weight", "grad_bias"}) {
    INFO(t);
    if (!bias && std::string(t) == "grad_bias") {
      CHECK_FALSE(v.at("max_abs_err").has(t));
      continue;
    }
    REQUIRE(v.at("max_abs_err").has(t));
    CHECK(v.at("max_abs_err").at(t).is_number());
    CHECK(v.at("max_abs_err").at(t).number <= v.at("tolerance").at(t).number);
  }
  return v;
}

std::string python() {
  const char* p = std::getenv("DTENSOR_TEST_PYTHON");
  return p ? p : "/usr/bin/python3";
}

}  // namespace

TEST_CASE("cli run: P=2 S3 check backward json passes with every field", "[cli][run]") {
  const json::Value v = check_passes(2, {"--placements", "S3"});
  CHECK(v.at("halo_bytes_sent_per_rank").number > 0);
  CHECK(v.at("peak_rss_mb").number > 0);
  // The private peak excludes mapped files: never above the raw one.
  REQUIRE(v.at("rss_ratio_private").is_number());
  CHECK(v.at("rss_ratio_private").number > 0);
  CHECK(v.at("rss_ratio_private").number <= v.at("rss_ratio").number);
  CHECK(v.at("fwd_ms").is_null());  // no --bench
}

TEST_CASE("cli run: P=4 mesh 2x2 S2 S3 passes", "[cli][run]") {
  check_passes(4, {"--mesh", "2x2", "--placements", "S2,S3", "--padding", "1", "--stride", "2",
                   "--kernel", "4,3"});
}

TEST_CASE("cli run: P=3 1-D input sharded on W passes", "[cli][run]") {
  check_passes(3, {"--input", "2,3,17", "--placements", "S2"});
  check_passes(3, {"--input", "2,4,17", "--placements", "S2", "--padding-lr", "2:1", "--dilation",
                   "2", "--groups", "2", "--dtype", "f64", "--no-bias", "--out-channels", "6"});
}

TEST_CASE("cli run: bf16 and a 3-D input on a 2x1x2 mesh pass", "[cli][run]") {
  check_passes(2, {"--dtype", "bf16", "--placements", "S2"});
  check_passes(4, {"--mesh", "2x1x2", "--input", "1,2,6,7,8", "--placements", "S2,R,S4"});
}

TEST_CASE("cli run: bench reports timings and ratios and traffic", "[cli][run]") {
  const Ran r = run_conv(2, {"--backward", "--bench", "--iters", "2", "--warmup", "1", "--json"});
  INFO("output:\n" << r.output);
  REQUIRE(r.code == 0);
  const json::Value v = last_json_line(r.output);
  for (const char* f : {"fwd_ms", "bwd_ms", "local_fwd_ms", "local_bwd_ms", "overhead_fwd",
                        "overhead_bwd", "gflops_fwd", "gflops_bwd"}) {
    INFO(f);
    REQUIRE(v.at(f).is_number());
    CHECK(v.at(f).number > 0);
  }
  CHECK(v.at("max_abs_err").is_null());  // no --check
}

TEST_CASE("cli run: a bad argument fails on every rank at once", "[cli][run]") {
  SECTION("under dtensor-run") {
    for (const Args& bad : {Args{"--stride", "0"}, Args{"--mesh", "2x2"}}) {
      const Ran r = run_conv(2, bad);
      INFO("output:\n" << r.output);
      CHECK(r.code != 0);
      CHECK(r.seconds < 10);
      CHECK(r.output.find("dtensor-conv: " + bad[0]) != std::string::npos);
    }
  }
  SECTION("each rank on its own exits 2 without waiting for its peer") {
    // Started without the launcher, so that no rank is stopped by anyone: each
    // must reach the verdict by itself, before any rendezvous.
    dtensor::launch::TempDir store("dtensor-cli-store");
    for (int rank = 0; rank < 2; ++rank) {
      const Ran r = run_program({kConv, "--padding", "-1"}, 20s,
                                {{"DTENSOR_RANK", std::to_string(rank)},
                                 {"DTENSOR_WORLD_SIZE", "2"},
                                 {"DTENSOR_LOCAL_RANK", std::to_string(rank)},
                                 {"DTENSOR_STORE", "file:" + store.path()}});
      INFO("rank " << rank << " output:\n" << r.output);
      CHECK(r.code == 2);
      CHECK(r.seconds < 5);
      CHECK(r.output.find("--padding") != std::string::npos);
    }
  }
}

TEST_CASE("cli run: sizes beyond memory and a failed init are named, with the rank", "[cli][run]") {
  // 10^14 f32 elements: past any address space (so refused whatever the
  // kernel's overcommit policy), yet no int64 overflow. Was std::bad_alloc,
  // exit 3, naming nothing.
  const Ran big = run_conv(2, {"--input", "100000,1000,1000,1000"});
  INFO("output:\n" << big.output);
  CHECK(big.code == 2);
  CHECK(big.output.find("dtensor-conv: rank 1: out of memory: the tensors of --input "
                        "100000,1000,1000,1000") != std::string::npos);
  // init fails (nothing listens on loopback port 1): the rank is the
  // launcher's, not "rank 0" on every rank.
  const Ran init = run_program({kConv}, 20s,
                               {{"DTENSOR_RANK", "1"},
                                {"DTENSOR_WORLD_SIZE", "2"},
                                {"DTENSOR_STORE", "redis://127.0.0.1:1"}});
  INFO("output:\n" << init.output);
  CHECK(init.code == 3);
  CHECK(init.output.find("dtensor-conv: rank 1: [dtensor.store] redis://127.0.0.1:1") !=
        std::string::npos);
}

TEST_CASE("cli run: dump writes every tensor and meta.json and check_dump.py agrees",
          "[cli][run]") {
  dtensor::launch::TempDir dir("dtensor-cli-dump");
  const std::string dump = dir.path() + "/dump";
  const Ran r = run_conv(2, {"--input", "2,3,9,10", "--placements", "S2", "--backward", "--dump",
                             dump, "--padding-lr", "1:0,2:1", "--stride", "2,1"});
  INFO("output:\n" << r.output);
  REQUIRE(r.code == 0);
  for (const char* f : {"input", "weight", "bias", "grad_output", "output", "grad_input",
                        "grad_weight", "grad_bias"}) {
    INFO(f);
    const std::string bytes = read_file(dump + "/" + f + ".npy");
    REQUIRE(bytes.size() > 64);
    CHECK(bytes.substr(0, 6) == "\x93NUMPY");
    CHECK(bytes.find("'descr': '<f4'") != std::string::npos);
  }
  const json::Value meta = json::parse(read_file(dump + "/meta.json"));
  CHECK(meta.at("dtype").string == "f32");
  CHECK(meta.at("padding").array.size() == 2);
  CHECK(meta.at("padding").array[1].array[0].number == 2);
  CHECK(meta.at("stride").array[0].number == 2);
  CHECK(meta.at("placements").array[0].string == "S(2)");
  CHECK(meta.at("files").object.size() == 8);

  // PyTorch is optional (not in scripts/install-deps.sh): skip when absent.
  const Ran probe = run_program({python(), "-c", "import torch, numpy"}, 60s);
  if (probe.code != 0) {
    WARN("SKIPPED check_dump.py: `" << python() << " -c 'import torch, numpy'` failed ("
                                    << probe.output.substr(0, 200) << ")");
    return;
  }
  const Ran check = run_program({python(), kCheckDump, dump}, 60s);
  INFO("check_dump.py:\n" << check.output);
  CHECK(check.code == 0);
  CHECK(check.output.find("ok") != std::string::npos);

  // A corrupted result must be caught: the checker is not a rubber stamp.
  {
    std::fstream f(dump + "/grad_input.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float wrong = 100.0f;
    f.write(reinterpret_cast<const char*>(&wrong), 4);
  }
  const Ran bad = run_program({python(), kCheckDump, dump}, 60s);
  INFO("check_dump.py on a corrupted dump:\n" << bad.output);
  CHECK(bad.code == 1);
  CHECK(bad.output.find("grad_input") != std::string::npos);
}

TEST_CASE("cli run: f16 passes --check and its float16 dump agrees with check_dump.py",
          "[cli][run][f16]") {
  dtensor::launch::TempDir dir("dtensor-cli-dump-f16");
  const std::string dump = dir.path() + "/dump";
  const json::Value v = check_passes(3, {"--dtype", "f16", "--input", "2,3,8,11", "--placements",
                                         "S3", "--padding-lr", "0:1,2:1", "--dump", dump});
  CHECK(v.at("ok").boolean);
  const json::Value meta = json::parse(read_file(dump + "/meta.json"));
  CHECK(meta.at("dtype").string == "f16");
  CHECK(meta.at("npy_dtype").string == "float16");
  CHECK(read_file(dump + "/output.npy").find("'descr': '<f2'") != std::string::npos);
  const Ran probe = run_program({python(), "-c", "import torch, numpy"}, 60s);
  if (probe.code != 0) {
    WARN("SKIPPED check_dump.py: `" << python() << " -c 'import torch, numpy'` failed");
    return;
  }
  const Ran check = run_program({python(), kCheckDump, dump}, 60s);
  INFO("check_dump.py:\n" << check.output);
  CHECK(check.code == 0);
  CHECK(check.output.find("f16") != std::string::npos);
  // A corrupted value must be caught: the last output element becomes 100.
  {
    std::fstream f(dump + "/output.npy", std::ios::in | std::ios::out | std::ios::binary);
    const std::uint16_t h = 0x5640;  // 100.0 in f16
    f.seekp(-2, std::ios::end);
    f.write(reinterpret_cast<const char*>(&h), 2);
  }
  const Ran bad = run_program({python(), kCheckDump, dump}, 60s);
  INFO("check_dump.py on a corrupted f16 dump:\n" << bad.output);
  CHECK(bad.code == 1);
  CHECK(bad.output.find("output") != std::string::npos);
}

TEST_CASE(
    "cli run: --device cpu passes, --device cuda without a GPU is a usage error on every rank",
    "[cli][run][device]") {
  check_passes(2, {"--device", "cpu", "--placements", "S3"});
  if (dtensor::cuda::is_available()) {
    WARN(
        "SKIPPED the no-GPU half: a CUDA device is available (scripts/gpu-check.sh runs "
        "--device cuda)");
    return;
  }
  const Ran r = run_conv(2, {"--device", "cuda", "--check"});
  INFO("output:\n" << r.output);
  CHECK(r.code == 2);
  CHECK(r.seconds < 10);
  CHECK(r.output.find("dtensor-conv: --device: cuda is not available") != std::string::npos);
  // Each rank reaches the verdict by itself, before any rendezvous (started
  // without the launcher, which would stop the peer of the first to fail).
  dtensor::launch::TempDir store("dtensor-cli-store");
  for (int rank = 0; rank < 2; ++rank) {
    const Ran own = run_program({kConv, "--device", "cuda"}, 20s,
                                {{"DTENSOR_RANK", std::to_string(rank)},
                                 {"DTENSOR_WORLD_SIZE", "2"},
                                 {"DTENSOR_LOCAL_RANK", std::to_string(rank)},
                                 {"DTENSOR_STORE", "file:" + store.path()}});
    INFO("rank " << rank << " output:\n" << own.output);
    CHECK(own.code == 2);
    CHECK(own.seconds < 5);
    CHECK(own.output.find("dtensor-conv: --device: cuda is not available") != std::string::npos);
  }
  if (!dtensor::cuda::is_built()) CHECK(r.output.find("built without CUDA") != std::string::npos);
}
