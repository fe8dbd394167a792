// DTENSOR_TEST_CASE as a user's test binary meets it (test_case_fixture.cpp,
// linked with dtensor::testing only): its cases pass on their ranks, and a
// failure on one rank fails the case within about a second, stopping ranks
// that would wait for the failed one, with a report that names the rank and
// shows its failed assertion.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tools/launch/process_set.h"

namespace {

struct FixtureRun {
  dtensor::launch::ExitStatus status;
  std::string output;
  double seconds = 0;
};

// Runs the fixture binary on one test spec, as ctest would, with `env` added.
FixtureRun run_fixture(const std::string& spec, std::map<std::string, std::string> env = {}) {
  dtensor::launch::TempDir dir("dtensor-fixture");
  dtensor::launch::ProcessSet set;
  dtensor::launch::ProcessSpec ps;
  ps.argv = {DTENSOR_TEST_CASE_FIXTURE, spec, "--use-colour", "no"};
  ps.env = std::move(env);
  ps.output_file = dir.path() + "/out.log";
  const auto t0 = std::chrono::steady_clock::now();
  set.start(ps);
  // Far past anything the cases should take: a hang is a failure, not a wait.
  dtensor::launch::wait_for(set, t0 + std::chrono::seconds(120));
  if (!set.all_exited()) set.stop_all(std::chrono::milliseconds(1000));
  FixtureRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.status = set.status(0);
  std::ifstream in(ps.output_file);
  std::stringstream ss;
  ss << in.rdbuf();
  run.output = ss.str();
  return run;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("DTENSOR_TEST_CASE runs its body on its ranks, with the environment passed on",
          "[harness][test_case]") {
  const FixtureRun run = run_fixture("[pass]", {{"DTENSOR_FIXTURE_MARK", "inherited"}});
  INFO(run.output);
  REQUIRE(run.status.ok());
  REQUIRE(contains(run.output, "All tests passed"));
  REQUIRE(contains(run.output, "2 test cases"));
}

TEST_CASE("DTENSOR_TEST_CASE fails a 3-rank case within 2 s of a failed REQUIRE on one rank",
          "[harness][test_case]") {
  const FixtureRun run = run_fixture("a REQUIRE fails on rank 1 of 3");
  INFO(run.output);
  REQUIRE(run.status.exited);
  REQUIRE(run.status.code != 0);
  // Ranks 0 and 2 sleep 50 s and the default deadline is 60 s: only stopping
  // them about a second after rank 1 failed ends the run this soon, start-up
  // and rendezvous of three processes included.
  REQUIRE(run.seconds < 5.0);
  REQUIRE(contains(run.output, "rank 1 failed: exit code 1 (first to fail)"));
  REQUIRE(contains(run.output, "[rank 1] "));
  REQUIRE(contains(run.output, "REQUIRE( answer != 42 )"));
  REQUIRE(contains(run.output, "42 != 42"));  // Catch's expansion, from rank 1's output
  REQUIRE(contains(run.output, "rank 0 failed"));
  REQUIRE(contains(run.output, "(stopped after another rank failed)"));
  // The failing rank comes first in the report, before the stopped ones.
  REQUIRE(run.output.find("rank 1 failed") < run.output.find("rank 0 failed"));
}

TEST_CASE("DTENSOR_TEST_CASE fails a 3-rank case within 2 s of an exception on one rank",
          "[harness][test_case]") {
  const FixtureRun run = run_fixture("rank 2 of 3 throws");
  INFO(run.output);
  REQUIRE(run.status.exited);
  REQUIRE(run.status.code != 0);
  REQUIRE(run.seconds < 5.0);
  REQUIRE(contains(run.output, "rank 2 failed: exit code 1 (first to fail)"));
  REQUIRE(contains(run.output, "rank 2 gave up"));
}
