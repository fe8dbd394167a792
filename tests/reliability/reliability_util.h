// Helpers shared by the reliability tests: how often to repeat a fault, a
// private temporary directory to prove that nothing is left behind, and
// checks that processes are gone.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/multiprocess.h"

namespace dtensor::testing {

/// DTENSOR_FAULT_REPEAT (default `fallback`): how many times each fault test
/// repeats its scenario. The suite keeps it small; the sweep (scripts/
/// fault-sweep.sh, CI) sets 10 to catch faults that only show at some timings.
inline int fault_repeat(int fallback = 1) {
  const char* v = std::getenv("DTENSOR_FAULT_REPEAT");
  const int n = v ? std::atoi(v) : fallback;
  return n >= 1 ? n : fallback;
}

/// Makes TMPDIR a fresh private directory for the life of the object, so that
/// every temporary file or store directory the job creates (the harness's
/// job directory, dtensor-run's private store, a solo store) lands in it. The
/// machine's /tmp is shared with other jobs, so "nothing new in /tmp" cannot
/// be checked reliably there; "this directory is empty afterwards" can.
class PrivateTmp {
 public:
  /// With `set_env` false, TMPDIR is left alone: for tests that pass the
  /// directory to a child process explicitly (and keep their own scratch files
  /// elsewhere).
  explicit PrivateTmp(bool set_env = true) : set_env_(set_env) {
    // A rank process runs the same test case: only the parent makes one (a
    // killed rank would leave its own behind, in the parent's).
    if (in_rank_process()) {
      set_env_ = false;
      return;
    }
    const char* old = std::getenv("TMPDIR");
    if (old) old_ = old;
    had_old_ = old != nullptr;
    std::string tmpl = std::string(old && *old ? old : "/tmp") + "/dtensor-reltmp-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
    if (set_env_) setenv("TMPDIR", path_.c_str(), 1);
  }
  ~PrivateTmp() {
    if (set_env_) {
      if (had_old_)
        setenv("TMPDIR", old_.c_str(), 1);
      else
        unsetenv("TMPDIR");
    }
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  PrivateTmp(const PrivateTmp&) = delete;
  PrivateTmp& operator=(const PrivateTmp&) = delete;

  const std::string& path() const { return path_; }
  /// What is left in the directory (names), e.g. a store the job did not remove.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    if (path_.empty()) return out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::string path_, old_;
  bool had_old_ = false;
  bool set_env_ = true;
};

/// Not running: gone, or a zombie nobody reaped yet.
inline bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

/// Waits up to `timeout` for every pid to be gone; returns those still running.
inline std::vector<pid_t> wait_gone(const std::vector<pid_t>& pids,
                                    std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::vector<pid_t> left;
  do {
    left.clear();
    for (pid_t p : pids)
      if (!process_gone(p)) left.push_back(p);
    if (left.empty()) break;
    struct timespec ts {
      0, 20'000'000
    };
    nanosleep(&ts, nullptr);
  } while (std::chrono::steady_clock::now() < until);
  return left;
}

/// Live processes (not zombies) whose environment holds `entry` exactly, e.g.
/// "TMPDIR=/tmp/dtensor-reltmp-XXXX": every process a test started gets a
/// unique one, so this finds any it left behind, even one that never got to
/// print its pid.
inline std::vector<pid_t> processes_with_env(const std::string& entry) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t at = 0;
    while (at < env.size()) {
      const std::size_t end = env.find('\0', at);
      const std::size_t stop = end == std::string::npos ? env.size() : end;
      if (env.compare(at, stop - at, entry) == 0) {
        const pid_t pid = static_cast<pid_t>(std::stol(name));
        if (!process_gone(pid)) out.push_back(pid);
        break;
      }
      at = stop + 1;
    }
  }
  return out;
}

/// Waits up to `timeout` for processes_with_env(entry) to be empty (a
/// launcher's clean-up helper outlives it by a moment); returns what is left.
inline std::vector<pid_t> wait_no_processes_with_env(const std::string& entry,
                                                     std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::vector<pid_t> left = processes_with_env(entry);
  while (!left.empty() && std::chrono::steady_clock::now() < until) {
    struct timespec ts {
      0, 20'000'000
    };
    nanosleep(&ts, nullptr);
    left = processes_with_env(entry);
  }
  return left;
}

/// The "pid=N" lines a program printed.
inline std::vector<pid_t> pids_in(const std::string& output) {
  static const std::regex re(R"(pid=(\d+))");
  std::vector<pid_t> out;
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it)
    out.push_back(static_cast<pid_t>(std::stol((*it)[1])));
  return out;
}

/// Whether some line of `text` has a match of `pattern` (regex_search per
/// line). Not one regex over the whole text such as "(.|\n)*...":
/// libstdc++'s matcher recurses once per character and overflows the stack
/// on a long output (it did under ASan).
inline bool has_line_matching(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, re)) return true;
  return false;
}

}  // namespace dtensor::testing
