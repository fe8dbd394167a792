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
      {"timeout NaN",
       {"-n", "2", "--timeout", "nan", kProgram, "conv-check"},
       {},
       2,
       {"--timeout"}},
      {"store on a port nobody listens",
       {"-n", "2", "--store", "redis://127.0.0.1:1", kProgram, "conv-check"},
       {},
       3,
       {"failed: exit code 3", "redis"}},
      {"hostname that does not resolve",
       {"-n", "2", kProgram, "conv-check"},
       {{"DTENSOR_HOSTNAME", "no-such-host.invalid"}},
       3,
       {"failed: exit code 3", "no-such-host.invalid"}},
      {"interface that does not exist",
       {"-n", "2", kProgram, "conv-check"},
       {{"DTENSOR_IFNAME", "nosuchif9"}},
       3,
       {"failed: exit code 3", "nosuchif9"}},
      {"DTENSOR_TIMEOUT malformed",
       {"-n", "2", kProgram, "conv-check"},
       {{"DTENSOR_TIMEOUT", "1m"}},
       3,
       {"failed: exit code 3", "DTENSOR_TIMEOUT"}},
      // Crashed dtensor-run (SIGSEGV in std::regex) before the fix.
      {"store URL of 100 kB",
       {"-n", "2", "--store", "redis://" + std::string(100000, 'a') + ":1x", kProgram,
        "conv-check"},
       {},
       2,
       {"--store"}},
      // Refused by the ranks before the fix; "--deadline 4e41" was undefined
      // behaviour in dtensor-run itself (found by the parsers fuzzer).
      {"timeout too large",
       {"-n", "2", "--timeout", "1e300", kProgram, "conv-check"},
       {},
       2,
       {"--timeout"}},
      {"deadline too large",
       {"-n", "2", "--deadline", "4e41", kProgram, "conv-check"},
       {},
       2,
       {"--deadline"}},
      {"program rejects its mode",
       {"-n", "2", kProgram, "no-such-mode"},
       {},
       2,
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

#ifdef DTENSOR_CONV_PATH
// dtensor-conv under dtensor-run: every bad argument must make every rank
// exit 2 with the same message naming the option (its parser runs on each
// rank before any communication), quickly, leaving nothing behind. The
// parser's unit table is tests/cli/options_tests.cpp; this checks the whole
// path, two ranks at a time.
TEST_CASE("bad input: dtensor-conv refuses bad arguments on every rank alike",
          "[reliability][bad-input][cli]") {
  const std::string conv = DTENSOR_CONV_PATH;
  struct ConvCase {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<ConvCase> cases = {
      {{"--input", "4,8"}, "--input"},                        // wrong tensor rank
      {{"--input", "1,2,3,4,5,6,7"}, "--input"},              // too many dims
      {{"--input", "1,4,8,8", "--groups", "3"}, "--groups"},  // groups vs channels
      {{"--input", "1,4,8,8", "--out-channels", "6", "--groups", "4"}, "--groups"},
      {{"--groups", "0"}, "--groups"},
      {{"--stride", "0"}, "--stride"},
      {{"--stride", "-2"}, "--stride"},
      {{"--dilation", "0"}, "--dilation"},
      {{"--padding", "-1"}, "--padding"},
      {{"--input", "1,1,4,4", "--kernel", "9", "--padding", "0"}, "--input"},  // output < 1
      {{"--dtype", "f8"}, "--dtype"},
      {{"--mesh", "4"}, "--mesh"},  // larger than the world
      {{"--mesh", "2x0"}, "--mesh"},
      {{"--placements", "S2,S3"}, "--placements"},  // count != mesh dims
      {{"--placements", "S9"}, "--placements"},     // dim out of range
      {{"--placements", "X"}, "--placements"},
      {{"--kernel", "3,3,3"}, "--kernel"},  // list length
      {{"--iters", "-1", "--bench"}, "--iters"},
      {{"--frobnicate"}, "--frobnicate"},
  };
  for (const auto& c : cases) {
    std::string joined;
    for (const auto& a : c.args)
      joined += " " + a;
    INFO("dtensor-run -n 2 dtensor-conv" << joined);
    PrivateTmp tmp(/*set_env=*/false);
    dtensor::launch::TempDir out_dir("dtensor-relout");
    dtensor::launch::ProcessSpec spec;
    spec.argv = {kRun, "-n", "2", conv};
    spec.argv.insert(spec.argv.end(), c.args.begin(), c.args.end());
    spec.output_file = out_dir.path() + "/output";
    spec.env["TMPDIR"] = tmp.path();
    spec.env["OMP_NUM_THREADS"] = "1";
    dtensor::launch::ProcessSet set;
    const auto t0 = std::chrono::steady_clock::now();
    set.start(spec);
    dtensor::launch::wait_for(set, t0 + 30s);
    const bool hung = !set.all_exited();
    if (hung) set.stop_all(1000ms);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ifstream in(spec.output_file);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string out = ss.str();
    INFO(out);
    REQUIRE_FALSE(hung);
    CHECK(set.status(0).code == 2);
    CHECK(seconds < 10);
    // The first line each rank printed: "[r] dtensor-conv: <option>: ...".
    std::string first[2];
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      for (int r = 0; r < 2; ++r) {
        const std::string prefix = "[" + std::to_string(r) + "] dtensor-conv: ";
        if (first[r].empty() && line.rfind(prefix, 0) == 0) first[r] = line.substr(prefix.size());
      }
    // Whichever rank fails first is named, and the launcher stops the other,
    // possibly before (or while) it prints: compare the complete messages.
    const std::string& named = first[0].rfind(c.names, 0) == 0 ? first[0] : first[1];
    CHECK_THAT(named, Catch::StartsWith(c.names));
    if (first[0].rfind(c.names, 0) == 0 && first[1].rfind(c.names, 0) == 0)
      CHECK(first[0] == first[1]);
    CHECK(wait_no_processes_with_env("TMPDIR=" + tmp.path(), 3s).empty());
    CHECK(tmp.leftovers().empty());
  }
}
#endif
