// Catch2's AssertionResult (what a failed REQUIRE said), for the message a
// failing rank sends its peers.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "testing/multiprocess.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "dtensor/core/fault.h"
#include "tools/launch/process_set.h"
#include "tools/launch/thread_share.h"

namespace dtensor::testing {
namespace {

constexpr const char* kRankVar = "DTENSOR_HARNESS_RANK";
constexpr const char* kCallVar = "DTENSOR_HARNESS_CALL";

// Catch2's test-spec syntax treats these as special; escape them to select
// exactly one test case by name.
std::string escape_test_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == ',' || c == '[' || c == ']' || c == '\\' || c == '*' || c == '~' || c == '"')
      out += '\\';
    out += c;
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The lines of Catch2's console reporter that say nothing about why a rank
// failed: its preamble (the test spec, its banner), the rules around the
// case's name and every blank line. The same for every rank, they would bury
// the lines that matter.
bool is_catch_decoration(const std::string& line) {
  return line.empty() || line.rfind("Filters: ", 0) == 0 ||
         line.find_first_not_of("~-.=") == std::string::npos ||
         line.find(" is a Catch v") != std::string::npos || line == "Run with -? for options";
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

// Which run_ranks call of the current test case this is (0-based). The
// parent and the child count the same calls in the same order.
int next_call_index() {
  static std::string current_test;
  static int counter = 0;
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  if (name != current_test) {
    current_test = name;
    counter = 0;
  }
  return counter++;
}

// What failed a rank's body, in a line: the exception's message, or for a
// failed assertion where it is and its expression as Catch2 prints them.
std::string failure_of_body(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return std::string("the test case's body threw: ") + x.what();
  } catch (...) {
  }
  const Catch::AssertionResult* last = Catch::getResultCapture().getLastResult();
  if (!last || last->succeeded()) return "the test case's body threw a non-std::exception";
  // Not the expansion: it would read the assertion's operands, gone by now.
  std::ostringstream os;
  os << last->getSourceInfo() << ": " << last->getExpressionInMacro() << " failed";
  if (last->hasMessage()) os << ": " << last->getMessage();
  os << " (its output has the details)";
  return os.str();
}

// A rank's flight recorder, read before the job's directory goes: its last
// entries kept, and the path the rank printed ("flight recorder written to
// PATH") replaced, since PATH no longer exists when the report is read.
void read_flight_recorder(const std::string& dir, int rank, RankResult& rr) {
  const std::string path = dir + "/dtensor-flight-rank" + std::to_string(rank) + ".txt";
  std::ifstream in(path);
  if (!in) return;
  constexpr std::size_t kKeep = 8;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    rr.flight_recorder.push_back(line);
    if (rr.flight_recorder.size() > kKeep) rr.flight_recorder.erase(rr.flight_recorder.begin());
  }
  const std::string instead = rr.flight_recorder.empty()
                                  ? "the test's directory (removed; it recorded no calls)"
                                  : "the test's directory (removed; its last calls below)";
  for (auto at = rr.output.find(path); at != std::string::npos; at = rr.output.find(path, at))
    rr.output.replace(at, path.size(), instead);
}

// The passed assertions in a rank's Catch2 summary: "All tests passed (12
// assertions in 1 test case)", or the "assertions: 5 | 4 passed | 1 failed"
// row after a failure. 0 when there is no summary (the rank was stopped).
std::int64_t passed_assertions(const std::string& output) {
  auto number_after = [&](const std::string& marker) -> std::int64_t {
    const auto at = output.rfind(marker);
    if (at == std::string::npos) return -1;
    return std::atoll(output.c_str() + at + marker.size());
  };
  if (const auto n = number_after("All tests passed ("); n >= 0) return n;
  const auto row = output.rfind("assertions:");
  if (row == std::string::npos) return 0;
  const auto bar = output.find('|', row);
  return bar == std::string::npos ? 0 : std::atoll(output.c_str() + bar + 1);
}

void run_as_rank(int call, const std::function<void(RankContext&)>& body, const RunOptions& o) {
  const char* want = std::getenv(kCallVar);
  if (!want || std::atoi(want) != call) return;  // another call of this test case
  RankContext ctx;
  ctx.rank = std::atoi(std::getenv(kRankVar));
  ctx.world_size = std::atoi(std::getenv("DTENSOR_WORLD_SIZE"));
  if (o.init_process_group) ctx.pg = init_process_group();
  try {
    body(ctx);
  } catch (...) {
    // The case failed on this rank: a failed REQUIRE (Catch2's own exception,
    // its message in the last assertion result) or an exception. Tell the
    // other ranks why before this process ends, or they would only find it
    // gone and say it reported nothing.
    if (o.init_process_group) dtensor::abort(failure_of_body(std::current_exception()));
    throw;
  }
  if (o.init_process_group) destroy_process_group();
}

}  // namespace

bool in_rank_process() {
  return std::getenv(kRankVar) != nullptr;
}

bool JobResult::passed() const {
  if (deadline_passed) return false;
  for (const RankResult& r : ranks)
    if (!r.ok) return false;
  return true;
}

std::string JobResult::report() const {
  std::ostringstream os;
  if (deadline_passed) os << "the job passed its deadline\n";
  // The rank that failed first comes first: its output says why (the failed
  // assertion, the exception); the ranks stopped after it mostly say nothing.
  std::vector<std::size_t> order;
  if (first_failed_rank >= 0) order.push_back(static_cast<std::size_t>(first_failed_rank));
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (static_cast<int>(r) != first_failed_rank) order.push_back(r);
  for (std::size_t r : order) {
    const RankResult& rr = ranks[r];
    if (rr.ok) continue;
    os << "rank " << r << " failed: " << rr.status
       << (static_cast<int>(r) == first_failed_rank && !deadline_passed ? " (first to fail)" : "")
       << (rr.killed_at_deadline ? " (hung: killed at the deadline)" : "")
       << (rr.stopped_after_failure ? " (stopped after another rank failed)" : "") << "\n";
    // The tail is what matters and keeps the report readable.
    const std::size_t keep = 4000;
    const std::string tail =
        rr.output.size() > keep ? "...\n" + rr.output.substr(rr.output.size() - keep) : rr.output;
    std::istringstream lines(tail);
    for (std::string line; std::getline(lines, line);)
      if (!is_catch_decoration(line)) os << "  [rank " << r << "] " << line << "\n";
    if (!rr.flight_recorder.empty()) {
      os << "  [rank " << r << "] flight recorder, its last " << rr.flight_recorder.size()
         << " calls (seq call op group peer bytes state start end duration):\n";
      for (const auto& entry : rr.flight_recorder)
        os << "  [rank " << r << "]   " << entry << "\n";
    }
  }
  return os.str();
}

JobResult run_ranks_collect(int world_size, const std::function<void(RankContext&)>& body,
                            const RunOptions& o) {
  const int call = next_call_index();
  if (in_rank_process()) {
    run_as_rank(call, body, o);
    return {};
  }
  launch::TempDir job_dir("dtensor-test");
  const std::string store_dir = job_dir.path() + "/store";
  std::filesystem::create_directory(store_dir);
  const std::string test_name = Catch::getResultCapture().getCurrentTestName();

  launch::ProcessSet set;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world_size; ++r) {
    launch::ProcessSpec spec;
    spec.argv = {self_exe(), escape_test_name(test_name), "--use-colour", "no"};
    // Defaults first, so that RunOptions::env can override them (e.g. a
    // test that rendezvouses through Redis sets DTENSOR_STORE itself).
    spec.env["DTENSOR_RANK"] = std::to_string(r);
    spec.env["DTENSOR_LOCAL_RANK"] = std::to_string(r);
    spec.env["DTENSOR_WORLD_SIZE"] = std::to_string(world_size);
    spec.env["DTENSOR_LOCAL_WORLD_SIZE"] = std::to_string(world_size);
    // As dtensor-run: each rank its share of the cores, unless the user chose.
    if (auto threads = launch::default_omp_threads(std::getenv("OMP_NUM_THREADS"), world_size))
      spec.env["OMP_NUM_THREADS"] = *threads;
    // Test binaries run side by side (ctest -j), so a rank rarely has a core
    // of its own even when its job fits the host: ranks wait without the long
    // spin (core/detail/wait_spin.h), unless the user chose.
    if (!std::getenv("DTENSOR_WAIT_SPIN_US")) spec.env["DTENSOR_WAIT_SPIN_US"] = "50";
    spec.env["DTENSOR_STORE"] = "file:" + store_dir;
    spec.env["DTENSOR_TIMEOUT"] = std::to_string(o.comm_timeout.count() / 1000.0);
    // A failing rank writes its flight recorder: into the job's directory
    // (removed with it), not the shared TMPDIR.
    spec.env["DTENSOR_FLIGHT_RECORDER_DIR"] = job_dir.path() + "/flight";
    for (auto& [k, v] : o.env)
      spec.env[k] = v;
    if (auto it = o.rank_env.find(r); it != o.rank_env.end())
      for (auto& [k, v] : it->second)
        spec.env[k] = v;
    // The harness's own selectors are never overridden.
    spec.env[kRankVar] = std::to_string(r);
    spec.env[kCallVar] = std::to_string(call);
    spec.output_file = job_dir.path() + "/rank" + std::to_string(r) + ".log";
    set.start(spec);
  }

  JobResult result;
  result.ranks.resize(static_cast<std::size_t>(world_size));
  std::vector<double> exit_seconds(static_cast<std::size_t>(world_size), -1);
  auto note_exits = [&] {
    for (int r = 0; r < world_size; ++r)
      if (set.status(r).exited && exit_seconds[r] < 0)
        exit_seconds[r] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto deadline = start + o.deadline;
  // Our own loop rather than launch::wait_for: each rank's exit time is noted
  // as it happens (tests assert on how fast survivors notice a failure).
  std::optional<std::size_t> failed;
  while (!set.all_exited() && std::chrono::steady_clock::now() < deadline) {
    failed = set.poll(std::chrono::milliseconds(20));
    note_exits();
    if (failed) break;
  }
  if (failed) {
    result.first_failed_rank = static_cast<int>(*failed);
    // Let the others notice the failure themselves, within the grace period.
    const auto until = std::min(deadline, std::chrono::steady_clock::now() + o.grace_after_failure);
    while (!set.all_exited() && std::chrono::steady_clock::now() < until) {
      set.poll(std::chrono::milliseconds(20));
      note_exits();
    }
  }
  std::vector<bool> running_at_deadline(static_cast<std::size_t>(world_size), false);
  if (!set.all_exited()) {
    result.deadline_passed = std::chrono::steady_clock::now() >= deadline;
    for (int r = 0; r < world_size; ++r)
      running_at_deadline[r] = !set.status(r).exited;
    set.stop_all(std::chrono::milliseconds(1000));
  }
  for (int r = 0; r < world_size; ++r) {
    RankResult& rr = result.ranks[r];
    const auto& st = set.status(r);
    rr.ok = st.ok();
    rr.status = st.describe();
    rr.killed_at_deadline = running_at_deadline[r] && result.deadline_passed;
    rr.stopped_after_failure = running_at_deadline[r] && !result.deadline_passed;
    rr.output = read_file(job_dir.path() + "/rank" + std::to_string(r) + ".log");
    read_flight_recorder(job_dir.path() + "/flight", r, rr);
    rr.assertions_passed = passed_assertions(rr.output);
    rr.seconds = exit_seconds[r];
    if (!rr.ok && result.first_failed_rank < 0) result.first_failed_rank = r;
  }
  return result;
}

void run_ranks(int world_size, const std::function<void(RankContext&)>& body,
               const RunOptions& options) {
  JobResult res = run_ranks_collect(world_size, body, options);
  if (in_rank_process()) return;
  // The ranks' passed assertions count in this binary's summary.
  for (const RankResult& r : res.ranks)
    for (std::int64_t i = 0; i < r.assertions_passed; ++i)
      Catch::getResultCapture().assertionPassed();
  if (!res.passed()) FAIL(res.report());
}

}  // namespace dtensor::testing
