// DTENSOR_TEST_CASE (include/dtensor/testing.h) on the project's harness.
#include <chrono>
#include <string>

#include "dtensor/testing.h"
#include "testing/multiprocess.h"

namespace dtensor::testing {
namespace {

// An assertion at the user's DTENSOR_TEST_CASE: SUCCEED and FAIL would name
// this file, which the user neither has nor cares about.
void assert_at(const char* file, int line, Catch::ResultWas::OfType result,
               const std::string& message) {
  Catch::AssertionHandler handler("DTENSOR_TEST_CASE",
                                  Catch::SourceLineInfo(file, static_cast<std::size_t>(line)),
                                  Catch::StringRef(), Catch::ResultDisposition::Normal);
  handler.handleMessage(result, message);
  handler.complete();  // throws (ends the case) on a failure, as FAIL does
}

}  // namespace

void run_test_case(int world_size, void (*body)(), const char* file, int line) {
  RunOptions options;
  // A user's ranks usually wait on each other, so after one fails the rest
  // block in a collective until their communication timeout. Stop them
  // quickly instead: the first failure is the one the report needs.
  options.grace_after_failure = std::chrono::seconds(1);
  const JobResult result = run_ranks_collect(
      world_size, [body](RankContext&) { body(); }, options);
  if (in_rank_process()) return;
  // The ranks' passed assertions count in this binary's summary, as if the
  // body had run here: the last one is the assertion below.
  std::int64_t passed = 0;
  for (const RankResult& r : result.ranks)
    passed += r.assertions_passed;
  for (std::int64_t i = 1; i < passed; ++i)
    Catch::getResultCapture().assertionPassed();
  // On success, a passed assertion says what was checked (Catch2's -s shows it).
  if (result.passed())
    assert_at(file, line, Catch::ResultWas::Ok,
              "all " + std::to_string(world_size) + " ranks passed (" + std::to_string(passed) +
                  " assertions)");
  else
    assert_at(file, line, Catch::ResultWas::ExplicitFailure, result.report());
}

}  // namespace dtensor::testing
