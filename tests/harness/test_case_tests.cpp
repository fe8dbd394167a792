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

// A run of a case that fails: the fixture exits, and not with 0.
FixtureRun run_failing(const std::string& spec) {
  FixtureRun run = run_fixture(spec);
  INFO(run.output);
  REQUIRE(run.status.exited);
  REQUIRE(run.status.code != 0);
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
  // Every rank's assertions count: 2 REQUIREs on 3 ranks and 2 on 2 ranks.
  REQUIRE(contains(run.output, "All tests passed (10 assertions in 2 test cases)"));
}

TEST_CASE("DTENSOR_TEST_CASE fails a 3-rank case within 2 s of a failed REQUIRE on one rank",
          "[harness][test_case]") {
  const FixtureRun run = run_failing("a REQUIRE fails on rank 1 of 3");
  INFO(run.output);
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
  const FixtureRun run = run_failing("rank 2 of 3 throws");
  INFO(run.output);
  REQUIRE(run.seconds < 5.0);
  REQUIRE(contains(run.output, "rank 2 failed: exit code 1 (first to fail)"));
  REQUIRE(contains(run.output, "rank 2 gave up"));
}

TEST_CASE("DTENSOR_TEST_CASE: ranks waiting for a rank whose REQUIRE failed are told why",
          "[harness][test_case]") {
  const FixtureRun run = run_failing("a REQUIRE fails on rank 1 of 3 while the others wait for it");
  INFO(run.output);
  // The others' barrier failed with rank 1's assertion, not with "its
  // process ended without telling the other ranks why". (Catch2 wraps long
  // lines of the report: look for the pieces.)
  CHECK(contains(run.output, "[dtensor.monitor] barrier: rank 1 failed: "));
  CHECK(contains(run.output, "REQUIRE( answer != 42 ) failed"));
  CHECK_FALSE(contains(run.output, "without telling"));
  // The flight recorders were in the test's directory, gone by now: the
  // report shows their last calls instead of their paths.
  CHECK(contains(run.output, "flight recorder, its last "));
  CHECK_FALSE(contains(run.output, "/flight/dtensor-flight-rank"));
}
