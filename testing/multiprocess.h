// The multi-process test harness (docs/design.md §6).
//
// Inside a Catch2 TEST_CASE, `run_ranks(P, body)` re-executes the test binary
// P times, each process running only this test case as one rank of a fresh
// job (own rendezvous directory), and waits for all of them. A rank that fails
// (a failed REQUIRE, an exception, a crash) fails the test with its rank and
// output; ranks still running past the deadline are killed and named.
//
// In the child processes `run_ranks` initialises the process group, runs
// `body` and tears the group down. A test may call run_ranks several times;
// each child runs only the call it was started for.
//
// Internal to the project's tests: users get DTENSOR_TEST_CASE
// (include/dtensor/testing.h), which is built on this.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/distributed.h"

namespace dtensor::testing {

struct RankContext {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<ProcessGroup> pg;  // the world group
};

struct RunOptions {
  /// The whole job must finish by then; hung ranks are killed after it.
  std::chrono::milliseconds deadline{60000};
  /// Communication timeout each rank uses (DTENSOR_TIMEOUT).
  std::chrono::milliseconds comm_timeout{20000};
  /// After one rank fails, how long the others get to fail on their own
  /// (they should: their peer is gone) before they are stopped.
  std::chrono::milliseconds grace_after_failure{std::chrono::seconds(30)};
  /// When false, the child does not call init_process_group (tests of rendezvous).
  bool init_process_group = true;
  /// Extra environment for every rank, and per rank.
  std::map<std::string, std::string> env;
  std::map<int, std::map<std::string, std::string>> rank_env;
};

struct RankResult {
  bool ok = false;
  bool killed_at_deadline = false;
  bool stopped_after_failure = false;
  std::string status;  // "exit code 1", "killed by signal 9 (SIGKILL)"
  std::string output;  // everything the rank printed
  double seconds = 0;  // from start until it exited
  /// The last entries of the flight recorder it wrote, if any: the file is
  /// in the job's directory, removed with the job, so the report shows them.
  std::vector<std::string> flight_recorder;
  /// The assertions that passed in it, as its Catch2 summary counts them.
  std::int64_t assertions_passed = 0;
};

struct JobResult {
  std::vector<RankResult> ranks;
  bool deadline_passed = false;
  int first_failed_rank = -1;
  /// Every rank succeeded, before the deadline.
  bool passed() const;
  /// A summary naming each failed rank, with the tail of its output.
  std::string report() const;
};

/// Runs body on P ranks and returns what happened, without asserting: for
/// tests whose ranks are expected to fail (fault injection, the harness's own tests).
/// In a rank process it runs the body and returns an empty JobResult: code after
/// the call that inspects the result must first `if (in_rank_process()) return;`.
JobResult run_ranks_collect(int world_size, const std::function<void(RankContext&)>& body,
                            const RunOptions& options = {});

/// Runs body on P ranks and fails the current test naming every rank that failed.
void run_ranks(int world_size, const std::function<void(RankContext&)>& body,
               const RunOptions& options = {});

/// True inside a rank process started by the harness.
bool in_rank_process();

}  // namespace dtensor::testing
