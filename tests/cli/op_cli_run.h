// The end-to-end harness of the dtensor-op tests: the real binary under the
// real launcher (dtensor-run), its output, its --json line, --check runs, and
// the Python that imports PyTorch for tools/check_op_dump.py. Included by the
// test files of tests/cli that run dtensor-op (the paths come from CMake).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/mini_json.h"
#include "tests/cli/run_program.h"
#include "tools/dtensor-op/options.h"
#include "tools/launch/process_set.h"

namespace dtensor::testing::op_cli_run {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;
namespace json = dtensor::testing::json;
using dtensor::op_cli::OpKind;
using dtensor::op_cli::parse_options;
using dtensor::op_cli::UsageError;

inline const std::string kRun = DTENSOR_RUN_PATH;
inline const std::string kOp = DTENSOR_OP_PATH;
inline const std::string kCheckOpDump = DTENSOR_CHECK_OP_DUMP_PATH;

using cli_run::Ran;
using cli_run::read_file;
using cli_run::run_program;

// dtensor-run -n P -- dtensor-op ARGS, with a communication timeout and a deadline.
inline Ran run_op(int ranks, const Args& args) {
  Args argv{kRun, "-n", std::to_string(ranks), "--timeout", "20", "--deadline", "50", "--", kOp};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

inline json::Value last_json_line(const std::string& output) {
  std::istringstream in(output);
  std::string line, last;
  while (std::getline(in, line))
    if (line.rfind("[0] ", 0) == 0) last = line.substr(4);
  INFO("rank 0's last line: " << last);
  return json::parse(last);
}

inline std::string python() {
  const char* p = std::getenv("DTENSOR_TEST_PYTHON");
  return p ? p : "/usr/bin/python3";
}

inline bool have_torch() {
  static const bool yes = run_program({python(), "-c", "import torch, numpy"}, 60s).code == 0;
  return yes;
}

// parse_options refuses `args` with a UsageError whose message starts with
// `option` (the option it names).
inline void rejects(const Args& args, const std::string& option) {
  INFO("args: " << Catch::Detail::stringify(args));
  try {
    parse_options(args);
    FAIL("accepted");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith(option));
  }
}

// Replays every dump with tools/check_op_dump.py against PyTorch and
// requires each to pass. Returns false (with a warning, not a failure) where
// `python()` cannot import torch and numpy.
inline bool replay_dumps(const std::vector<std::string>& dumps) {
  if (!have_torch()) {
    WARN("SKIPPED check_op_dump.py: `" << python() << " -c 'import torch, numpy'` failed");
    return false;
  }
  for (const auto& dump : dumps) {
    const Ran check = run_program({python(), kCheckOpDump, dump}, 120s);
    INFO("check_op_dump.py " << dump << ":\n" << check.output);
    CHECK(check.code == 0);
  }
  return true;
}

// The replay must be able to fail: `dump` (already damaged by the caller)
// must be refused, naming `tensor` when it is given.
inline void replay_refuses(const std::string& dump, const std::string& tensor = {}) {
  const Ran bad = run_program({python(), kCheckOpDump, dump}, 120s);
  INFO("check_op_dump.py on a corrupted dump:\n" << bad.output);
  CHECK(bad.code == 1);
  if (!tensor.empty()) CHECK(bad.output.find(tensor) != std::string::npos);
}

// replay_dumps, then 100 written over the last f32 element of `tensor` in
// `dump`, which the replay must then refuse, naming it.
inline void replay_dumps_and_corrupt(const std::vector<std::string>& dumps, const std::string& dump,
                                     const std::string& tensor) {
  if (!replay_dumps(dumps)) return;
  {
    std::fstream f(dump + "/" + tensor + ".npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float wrong = 100.0f;
    f.write(reinterpret_cast<const char*>(&wrong), 4);
  }
  replay_refuses(dump, tensor);
}

// Runs `args` on two ranks and requires it to fail with a usage error (exit
// 2) that names `option` on every rank.
inline void refused_on_every_rank(const Args& args, const std::string& option) {
  INFO("args: " << Catch::Detail::stringify(args));
  const Ran r = run_op(2, args);
  INFO("output:\n" << r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("[0] dtensor-op: " + option) != std::string::npos);
  CHECK(r.output.find("[1] dtensor-op: " + option) != std::string::npos);
}

// Runs `args` plus `flags` and --dump DUMP on two ranks, requires success
// and returns the dump's meta.json.
inline json::Value dumped_meta(Args args, const std::vector<std::string>& flags,
                               const std::string& dump) {
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--dump", dump});
  const Ran r = run_op(2, args);
  INFO("args: " << Catch::Detail::stringify(args) << "\noutput:\n" << r.output);
  REQUIRE(r.code == 0);
  return json::parse(read_file(dump + "/meta.json"));
}

// Runs OP ARGS --check --backward --json on `ranks` ranks and requires a pass
// with a finite error within tolerance for every `tensors`.
inline json::Value check_passes(int ranks, Args args, const std::vector<std::string>& tensors) {
  for (const char* a : {"--check", "--backward", "--json"})
    args.push_back(a);
  const Ran r = run_op(ranks, args);
  INFO("output:\n" << r.output);
  REQUIRE(r.code == 0);
  const json::Value v = last_json_line(r.output);
  CHECK(v.at("ok").boolean);
  CHECK(v.at("op").string == args[0]);
  for (const char* f : {"fwd_ms", "bwd_ms", "local_fwd_ms", "local_bwd_ms", "overhead_fwd",
                        "overhead_bwd", "world_size", "mesh", "placements", "output_placements",
                        "input", "output", "dtype", "device", "iters"})
    CHECK(v.has(f));
  for (const auto& t : tensors) {
    INFO(t);
    REQUIRE(v.at("max_abs_err").has(t));
    REQUIRE(v.at("max_abs_err").at(t).is_number());
    CHECK(v.at("max_abs_err").at(t).number <= v.at("tolerance").at(t).number);
  }
  CHECK(v.at("max_abs_err").object.size() == tensors.size());
  return v;
}

}  // namespace dtensor::testing::op_cli_run
