// Bad input through the command line: dtensor-run given settings its ranks
// cannot use, or a program that rejects its arguments. Each must end in a
// non-zero exit naming the failed rank, with the rank's own message naming
// the setting; nothing may hang. (dtensor-run's own usage errors — exit 2,
// nothing started — are the table in tests/launcher/usage_cases.h.)
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/reliability/reliability_util.h"
#include "tools/launch/process_set.h"

using namespace dtensor::testing;
using namespace std::chrono_literals;

namespace {

const std::string kRun = DTENSOR_RUN_PATH;
const std::string kProgram = DTENSOR_FAULT_PROGRAM;

struct CliCase {
  std::string name;
  std::vector<std::string> args;           // after dtensor-run
  std::map<std::string, std::string> env;  // the launcher's environment
  int code;                                // expected exit status
  std::vector<std::string> names;          // the output must contain each
};

}  // namespace

TEST_CASE("bad input: dtensor-run with settings the ranks reject exits non-zero naming them",
          "[reliability][bad-input][launcher]") {
  const std::vector<CliCase> cases = {
      {"timeout NaN", {"-n", "2", "--timeout", "nan", kProgram, "conv-check"}, {}, 2,
       {"--timeout"}},
      {"store on a port nobody listens",
       {"-n", "2", "--store", "redis://127.0.0.1:1", kProgram, "conv-check"}, {}, 3,
       {"failed: exit code 3", "redis"}},
      {"hostname that does not resolve", {"-n", "2", kProgram, "conv-check"},
       {{"DTENSOR_HOSTNAME", "no-such-host.invalid"}}, 3,
       {"failed: exit code 3", "no-such-host.invalid"}},
      {"interface that does not exist", {"-n", "2", kProgram, "conv-check"},
       {{"DTENSOR_IFNAME", "nosuchif9"}}, 3, {"failed: exit code 3", "nosuchif9"}},
      {"DTENSOR_TIMEOUT malformed", {"-n", "2", kProgram, "conv-check"},
       {{"DTENSOR_TIMEOUT", "1m"}}, 3, {"failed: exit code 3", "DTENSOR_TIMEOUT"}},
      // Crashed dtensor-run (SIGSEGV in std::regex) before the fix.
      {"store URL of 100 kB",
       {"-n", "2", "--store", "redis://" + std::string(100000, 'a') + ":1x", kProgram,
        "conv-check"},
       {}, 2, {"--store"}},
      {"timeout too large for the ranks", {"-n", "2", "--timeout", "1e300", kProgram, "conv-check"},
       {}, 3, {"failed: exit code 3", "DTENSOR_TIMEOUT"}},
      {"program rejects its mode", {"-n", "2", kProgram, "no-such-mode"}, {}, 2,
       {"failed: exit code 2", "no-such-mode"}},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PrivateTmp tmp(/*set_env=*/false);
    dtensor::launch::TempDir out_dir("dtensor-relout");
    dtensor::launch::ProcessSpec spec;
    spec.argv = {kRun};
    spec.argv.insert(spec.argv.end(), c.args.begin(), c.args.end());
    spec.output_file = out_dir.path() + "/output";
    spec.env = c.env;
    spec.env["TMPDIR"] = tmp.path();
    dtensor::launch::ProcessSet set;
    set.start(spec);
    dtensor::launch::wait_for(set, std::chrono::steady_clock::now() + 30s);
    const bool hung = !set.all_exited();
    if (hung) set.stop_all(1000ms);
    std::ifstream in(spec.output_file);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string out = ss.str();
    INFO(out);
    REQUIRE_FALSE(hung);
    CHECK(set.status(0).code == c.code);
    for (const auto& n : c.names)
      CHECK_THAT(out, Catch::Contains(n));
    CHECK(wait_gone(pids_in(out), 2s).empty());
    CHECK(wait_no_processes_with_env("TMPDIR=" + tmp.path(), 3s).empty());
    {
    const auto left = tmp.leftovers();
    for (const auto& name : left)
      UNSCOPED_INFO("left behind in TMPDIR: " << name);
    CHECK(left.empty());
  }
  }
}
