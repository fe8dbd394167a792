// Checkpoints across real processes: a save killed with SIGKILL at each step
// of the commit protocol leaves a loadable checkpoint (the previous one, or
// the new one once its index is in place), and dtensor-ckpt's listing and
// consolidated file, the latter read by an independent Python reader.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "dtensor/checkpoint/checkpoint.h"
#include "tools/launch/process_set.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Args = std::vector<std::string>;
using Catch::Matchers::Contains;

struct Ran {
  int code = -1;
  int signal = 0;
  std::string output;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Ran run_program(const Args& argv) {
  dtensor::launch::TempDir tmp("dtensor-ckpt-test");
  dtensor::launch::ProcessSpec spec;
  spec.argv = argv;
  spec.env["OMP_NUM_THREADS"] = "1";
  spec.output_file = tmp.path() + "/output";
  dtensor::launch::ProcessSet set;
  set.start(spec);
  dtensor::launch::wait_for(set, std::chrono::steady_clock::now() + 60s);
  if (!set.all_exited()) {
    set.stop_all(1000ms);
    FAIL(argv[0] << " did not finish within 60 s; output:\n" << read_text(spec.output_file));
  }
  return {set.status(0).code, set.status(0).signal, read_text(spec.output_file)};
}

// The test program on `ranks` processes.
Ran run_ranks(int ranks, const Args& args) {
  Args argv{DTENSOR_RUN_PATH,
            "-n",
            std::to_string(ranks),
            "--timeout",
            "20",
            "--deadline",
            "50",
            "--",
            DTENSOR_TEST_CHECKPOINT_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

void require_ok(const Ran& r) {
  INFO(r.output);
  REQUIRE(r.code == 0);
  REQUIRE(r.signal == 0);
}

struct TempCheckpointDir {
  std::string path =
      (fs::temp_directory_path() / ("dtensor-ckpt-proc-" + std::to_string(std::random_device{}())))
          .string();
  TempCheckpointDir() { fs::create_directories(path); }
  ~TempCheckpointDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& f : fs::directory_iterator(dir))
    names.insert(f.path().filename().string());
  return names;
}

std::string generation_of(const std::string& dir) {
  return dtensor::read_checkpoint_index(dir).at(0).shards.at(0).file;
}

}  // namespace

TEST_CASE("a save killed at any step leaves a checkpoint that loads bit-exactly",
          "[checkpoint][crash]") {
  TempCheckpointDir dir;
  require_ok(run_ranks(2, {"save", dir.path, "1"}));
  const std::string first = generation_of(dir.path);

  // Killed while its shard file is half written: a temporary file is left behind.
  Ran r = run_ranks(2, {"save", dir.path, "2", "--kill-at", "half-written", "--kill-rank", "1"});
  REQUIRE(r.code != 0);
  bool tmp_left = false;
  for (const auto& n : listing(dir.path))
    tmp_left |= n.ends_with(".safetensors.tmp");
  REQUIRE(tmp_left);
  REQUIRE(generation_of(dir.path) == first);
  require_ok(run_ranks(3, {"verify", dir.path, "1"}));  // on 3 ranks, other placements

  // Killed after every shard file is in place and the new index is written,
  // just before the rename that commits it: the old checkpoint is still the one.
  r = run_ranks(2, {"save", dir.path, "3", "--kill-at", "index-written", "--kill-rank", "0"});
  REQUIRE(r.code != 0);
  REQUIRE(listing(dir.path).count("index.json.tmp") == 1);
  REQUIRE(generation_of(dir.path) == first);
  require_ok(run_ranks(1, {"verify", dir.path, "1"}));
  REQUIRE(run_ranks(1, {"verify", dir.path, "3"}).code == 1);  // the oracle can tell them apart

  // Killed after the rename: the new checkpoint is committed and loads.
  r = run_ranks(2, {"save", dir.path, "4", "--kill-at", "index-committed", "--kill-rank", "0"});
  REQUIRE(r.code != 0);
  REQUIRE(generation_of(dir.path) != first);
  require_ok(run_ranks(3, {"verify", dir.path, "4"}));

  // The next save removes every leftover: only its index and its files remain.
  require_ok(run_ranks(2, {"save", dir.path, "5"}));
  require_ok(run_ranks(2, {"verify", dir.path, "5"}));
  std::set<std::string> referenced{"index.json"};
  for (const auto& e : dtensor::read_checkpoint_index(dir.path))
    for (const auto& s : e.shards)
      referenced.insert(s.file);
  REQUIRE(listing(dir.path) == referenced);
}

TEST_CASE("a rank killed after writing its shards fails the save and keeps the old one",
          "[checkpoint][crash]") {
  TempCheckpointDir dir;
  require_ok(run_ranks(2, {"save", dir.path, "1"}));
  const Ran r =
      run_ranks(2, {"save", dir.path, "2", "--kill-at", "shard-written", "--kill-rank", "1"});
  REQUIRE(r.code != 0);
  require_ok(run_ranks(2, {"verify", dir.path, "1"}));
}

TEST_CASE("dtensor-ckpt info lists every tensor and consolidate writes one safetensors file",
          "[checkpoint][cli]") {
  TempCheckpointDir dir;
  const std::string ckpt = dir.path + "/ckpt", expected = dir.path + "/expected";
  require_ok(run_ranks(2, {"save", ckpt, "7", "--expected", expected}));

  Ran r = run_program({DTENSOR_CKPT_PATH, "info", ckpt});
  require_ok(r);
  CHECK_THAT(r.output, Contains("model.weight") && Contains("shape=[37, 300]") &&
                           Contains("dtype=f32") && Contains("placements=S(0)"));
  CHECK_THAT(r.output, Contains("optim.step") && Contains("shape=[]") && Contains("dtype=f64") &&
                           Contains("placements=R"));
  CHECK_THAT(r.output, Contains("model.bias") && Contains("dtype=bf16"));
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 5);  // one line per tensor

  r = run_program({DTENSOR_CKPT_PATH, "info", ckpt, "--json"});
  require_ok(r);
  CHECK_THAT(r.output, Contains("\"name\":\"model.half\"") && Contains("\"dtype\":\"f16\"") &&
                           Contains("\"shape\":[4,6]") && Contains("\"mesh_shape\":[2]"));

  const std::string out = dir.path + "/whole.safetensors";
  require_ok(run_program({DTENSOR_CKPT_PATH, "consolidate", ckpt, out}));
  // The independent reader: json + struct + numpy (and `safetensors` when importable).
  r = run_program(
      {"/usr/bin/python3", DTENSOR_CHECK_SAFETENSORS_PATH, out, expected + "/manifest.json"});
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Contains("5 tensors match"));

  // A bad directory: a clear message and a nonzero status.
  r = run_program({DTENSOR_CKPT_PATH, "info", dir.path + "/missing"});
  CHECK(r.code == 1);
  CHECK_THAT(r.output, Contains("no checkpoint in") && Contains("missing"));
  r = run_program({DTENSOR_CKPT_PATH, "consolidate", expected, dir.path + "/x.safetensors"});
  CHECK(r.code == 1);
  CHECK_THAT(r.output, Contains("has no index.json"));
  r = run_program({DTENSOR_CKPT_PATH, "frobnicate"});
  CHECK(r.code == 2);
}
