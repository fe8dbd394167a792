// Runs one program to completion for the CLI tests: the real binary (often
// the real launcher around it), its exit status and its output. Shared by
// the dtensor-conv and dtensor-op tests.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tools/launch/process_set.h"

namespace dtensor::testing::cli_run {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;

struct Ran {
  int code = -1;
  int signal = 0;
  double seconds = 0;
  std::string output;  // stdout and stderr, interleaved
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv to completion (or kills it at `timeout` and fails the test).
inline Ran run_program(const Args& argv, std::chrono::seconds timeout = 60s,
                       const std::map<std::string, std::string>& env = {}) {
  dtensor::launch::TempDir dir("dtensor-cli-test");
  dtensor::launch::ProcessSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.env["OMP_NUM_THREADS"] = "1";  // ranks share the test machine's cores
  spec.output_file = dir.path() + "/output";
  dtensor::launch::ProcessSet set;
  const auto start = std::chrono::steady_clock::now();
  set.start(spec);
  dtensor::launch::wait_for(set, start + timeout);
  if (!set.all_exited()) {
    set.stop_all(1000ms);
    FAIL(argv[0] << " did not finish within " << timeout.count() << " s; output:\n"
                 << read_file(spec.output_file));
  }
  Ran r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.code = set.status(0).code;
  r.signal = set.status(0).signal;
  r.output = read_file(spec.output_file);
  return r;
}

}  // namespace dtensor::testing::cli_run
