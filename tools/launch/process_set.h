// Starting, watching and stopping a set of rank processes. Shared by the
// launcher (dtensor-run) and the multi-process test harness, which differ
// only in where output goes and what they do when a rank fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtensor::launch {

struct ProcessSpec {
  std::vector<std::string> argv;           // argv[0] is the program (PATH is searched)
  std::map<std::string, std::string> env;  // added to (or overriding) this process's environment
  /// Where stdout+stderr go: empty = forwarded line by line to our stdout with
  /// `line_prefix` in front; otherwise a file path (the harness reads it later).
  std::string output_file;
  std::string line_prefix;
  /// When forwarding: send stderr to our stderr (prefixed too) instead of
  /// merging it into stdout, so that `2>file` on the launcher still separates them.
  bool separate_stderr = false;
  /// When not empty, the process may run on these CPUs only (set before exec).
  std::vector<int> cpus;
};

struct ExitStatus {
  bool exited = false;  // false while running
  int code = 0;         // exit code when it exited normally
  int signal = 0;       // the signal that ended it, or 0
  bool killed_by_us = false;
  bool ok() const { return exited && signal == 0 && code == 0; }
  std::string describe() const;  // "exit code 3", "killed by signal 9 (SIGKILL)", ...
};

class ProcessSet {
 public:
  ProcessSet() = default;
  ~ProcessSet();  // kills whatever is still running, so no process outlives us
  ProcessSet(const ProcessSet&) = delete;
  ProcessSet& operator=(const ProcessSet&) = delete;

  /// Starts one process; throws std::runtime_error when fork/exec fails.
  void start(const ProcessSpec& spec);
  std::size_t size() const { return procs_.size(); }
  const ExitStatus& status(std::size_t i) const { return procs_[i].status; }
  pid_t pid(std::size_t i) const { return procs_[i].pid; }

  /// Pumps output and reaps children for up to `budget`. Returns the index of the
  /// first process that exited unsuccessfully since the last call, if any.
  std::optional<std::size_t> poll(std::chrono::milliseconds budget);
  bool all_exited() const;
  /// `first_signal` (SIGTERM unless told) to all still running; SIGKILL to those
  /// still alive after `grace`, or as soon as `hurry` returns true (e.g. a second Ctrl-C).
  /// Returns once every process has exited.
  void stop_all(std::chrono::milliseconds grace, int first_signal = SIGTERM,
                const std::function<bool()>& hurry = {});
  /// Forwards a signal to every running process.
  void signal_all(int sig);
  /// Pumps output until every process has exited, `budget` passes, or `hurry`
  /// returns true; returns whether all have exited.
  bool wait_exited(std::chrono::milliseconds budget, const std::function<bool()>& hurry = {});
  /// Once the processes have exited: reads their output to the end (a child
  /// of a rank may still hold its pipe) for up to `grace`, then shows what is
  /// left, a last line without its newline included. wait_for and stop_all
  /// call it; nothing a process wrote before it ended is lost.
  void finish_output(std::chrono::milliseconds grace);

 private:
  struct Stream {
    int fd = -1;          // pipe read end when forwarding
    std::string pending;  // partial line
    bool to_stderr = false;
  };
  struct Proc {
    pid_t pid = -1;
    int exit_fd = -1;  // a pidfd: readable once the process has exited (-1: none)
    Stream out, err;   // err is used only with separate_stderr
    std::string prefix;
    ExitStatus status;
    bool reported = false;
  };
  // Shows the complete lines read so far; with `final`, a last partial one too.
  void drain(Proc& p, Stream& s, bool final);
  std::vector<Proc> procs_;
};

/// Runs until all processes exit, one fails, the deadline passes, or
/// `interrupted` (checked about every 50 ms, e.g. a flag set by a signal handler)
/// returns true.
enum class Outcome { AllSucceeded, RankFailed, DeadlinePassed, Interrupted };
struct WaitResult {
  Outcome outcome;
  std::size_t failed_index = 0;  // for RankFailed: the first rank that failed
};
WaitResult wait_for(ProcessSet& set, std::chrono::steady_clock::time_point deadline,
                    const std::function<bool()>& interrupted = {});

/// A fresh, private directory under $TMPDIR (or /tmp); removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& stem);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dtensor::launch
