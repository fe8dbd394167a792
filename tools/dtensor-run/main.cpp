// dtensor-run: starts the ranks of a libdtensor job on this host and
// watches them (see `dtensor-run --help`, and options.cpp for the rules).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "core/detail/cpu_budget.h"
#include "core/detail/temp_dirs.h"
#include "tools/dtensor-run/core_binding.h"
#include "tools/dtensor-run/flight_summary.h"
#include "tools/dtensor-run/job_identity.h"
#include "tools/dtensor-run/options.h"
#include "tools/launch/process_set.h"
#include "tools/launch/thread_share.h"

namespace dtensor::run {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// After a rank fails, the others first get a moment to end on their own: a
// rank blocked on the dead peer fails at once, with an error that says what
// it saw, and stopping it then could cut that error mid-line. Then they only
// have to die: a short grace for their SIGTERM handlers (libdtensor's flushes
// stdio). A signal from the user may ask them to save work: longer.
constexpr auto kNoticeWindow = 1s;
constexpr auto kFailureGrace = 3s;
constexpr auto kSignalGrace = 10s;
// How long a failed job's survivors get to write their flight recorders.
constexpr auto kRecorderGrace = 1500ms;

volatile std::sig_atomic_t g_signal = 0;        // the first SIGINT/SIGTERM/SIGHUP we got
volatile std::sig_atomic_t g_signal_count = 0;  // how many

extern "C" void on_stop_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
  g_signal_count = g_signal_count + 1;
}
extern "C" void on_sigpipe(int) {}

void install_signal_handlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the wait loop's poll() returns at once
  sa.sa_handler = on_stop_signal;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaction(sig, &sa, nullptr);
  // A closed stdout (`| head`) must not kill us before we stop the ranks and
  // remove the store. A handler rather than SIG_IGN: exec resets handlers to
  // the default but keeps SIG_IGN, and the ranks should get the usual SIGPIPE.
  sa.sa_handler = on_sigpipe;
  sigaction(SIGPIPE, &sa, nullptr);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Removes `dir` when this process ends, however it ends: destructors cover
// exits and exceptions, but not SIGKILL. A child blocks on a pipe only we
// hold the write end of; end of file means we are gone.
void remove_when_we_exit(const std::string& dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;  // best effort: TempDir still removes it
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    // Ctrl-C reaches the whole process group; it stops the job, not the cleanup.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
      signal(sig, SIG_IGN);
    // Keep only the read end: not the write end (we would wait for ourselves)
    // and no descriptor of whoever started us (a pipe reading our output would
    // otherwise wait for this child too).
    const int wait_fd = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
    const int devnull = open("/dev/null", O_RDWR);
    for (int fd : {0, 1, 2})
      dup2(devnull, fd);
    if (wait_fd > 3) close_range(3, static_cast<unsigned>(wait_fd) - 1, 0);
    close_range(static_cast<unsigned>(wait_fd) + 1, ~0U, 0);
    char c;
    while (read(wait_fd, &c, 1) < 0 && errno == EINTR) {
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    _exit(0);
  }
  close(fds[0]);  // the write end stays open (close-on-exec: the ranks do not get it)
}

// Checked before starting anything, so that a typo gives one clear message
// rather than P "exec failed" lines. Returns 0 or the exit code to use.
int check_program(const std::string& program) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  auto exists = [](const std::string& p) { return access(p.c_str(), F_OK) == 0; };
  bool seen = false;
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return 0;
    seen = exists(program);
  } else {
    // The search execvp does, with its default PATH.
    const char* path_env = std::getenv("PATH");
    std::istringstream path(path_env ? path_env : "/bin:/usr/bin");
    std::string dir;
    while (std::getline(path, dir, ':')) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
      if (executable(candidate)) return 0;
      seen = seen || exists(candidate);
    }
  }
  std::cerr << "dtensor-run: " << program
            << (seen ? ": not an executable file" : ": no such program (looked in PATH)")
            << "; nothing was started\n";
  return seen ? exit_code::kNotExecutable : exit_code::kNotFound;
}

int run_job(const Options& o) {
  // Declared before the ProcessSet: destroyed after it, once the ranks are gone.
  // The job's private directory: the store unless one was given, and the
  // ranks' flight recorders unless the user chose a directory for them.
  std::optional<launch::TempDir> job_dir;
  // What killed launchers and solo programs left behind goes first; ours
  // records its owner so that the next launch can tell the same of it.
  temp_dirs::remove_abandoned();
  job_dir.emplace("dtensor-run");
  temp_dirs::claim(job_dir->path());
  remove_when_we_exit(job_dir->path());
  std::map<std::string, std::string> recorder_env;
  const std::string recorder_dir = point_flight_recorders(job_dir->path(), recorder_env);
  std::string store = o.store;
  if (store.empty()) {
    const std::string dir = job_dir->path() + "/store";
    fs::create_directory(dir);
    store = "file:" + dir;
  } else if (store.rfind("file:", 0) == 0) {
    fs::create_directories(store.substr(5));  // the user's: created if missing, never removed
  }

  const JobIdentity job = job_identity(o, [](const char* name) { return std::getenv(name); });
  // As torchrun: without the user's OMP_NUM_THREADS, each rank gets its share
  // of the cores (one thread per core each would oversubscribe the host).
  const auto omp_threads = launch::default_omp_threads(std::getenv("OMP_NUM_THREADS"), o.nproc);
  if (omp_threads) {
    // A container's CPU limit below the cores it sees is worth naming: the
    // share then looks small for the machine.
    const cpu_budget::Budget cpus = cpu_budget::read_budget();
    const std::string share =
        cpus.own() < cpus.affinity
            ? "its share of the " + std::to_string(cpus.own()) + " CPUs of this cgroup's CPU quota"
            : std::string("its share of this host's cores");
    std::cerr << "dtensor-run: OMP_NUM_THREADS is not set: each of the " << o.nproc
              << " ranks gets OMP_NUM_THREADS=" << *omp_threads << " (" << share
              << "); set it to choose another" << std::endl;
  }
  launch::ProcessSet set;
  const auto slices =
      o.bind_cores ? core_slices(o.nproc, allowed_cpus()) : std::vector<std::vector<int>>(o.nproc);
  for (int local = 0; local < o.nproc; ++local) {
    launch::ProcessSpec spec;
    spec.cpus = slices[static_cast<std::size_t>(local)];
    spec.argv = o.command;
    spec.env = rank_environment(o, local, store);
    spec.env.merge(job_environment(job));
    spec.env.insert(recorder_env.begin(), recorder_env.end());
    if (omp_threads) spec.env["OMP_NUM_THREADS"] = *omp_threads;
    spec.line_prefix = "[" + std::to_string(o.global_rank(local)) + "] ";
    spec.separate_stderr = true;
    set.start(spec);
  }

  auto still_running = [&] {
    std::string ranks;
    for (std::size_t i = 0; i < set.size(); ++i)
      if (!set.status(i).exited)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(o.global_rank(static_cast<int>(i)));
    return ranks;
  };
  const auto deadline = o.deadline ? std::chrono::steady_clock::now() + *o.deadline
                                   : std::chrono::steady_clock::time_point::max();
  const auto result = launch::wait_for(set, deadline, [] { return g_signal != 0; });
  // While stopping after a failure or at the deadline, a signal from the user
  // means "now": SIGKILL at once.
  auto user_hurries = [] { return g_signal != 0; };

  switch (result.outcome) {
    case launch::Outcome::AllSucceeded:
      return exit_code::kOk;

    case launch::Outcome::RankFailed: {
      const std::size_t i = result.failed_index;
      const launch::ExitStatus failed = set.status(i);
      const std::string others = still_running();
      std::cerr << "dtensor-run: rank " << o.global_rank(static_cast<int>(i))
                << " failed: " << failed.describe()
                << (others.empty() ? "" : "; stopping the other ranks") << std::endl;
      set.wait_exited(kNoticeWindow, user_hurries);
      std::vector<int> ranks;
      for (std::size_t j = 0; j < set.size(); ++j)
        ranks.push_back(o.global_rank(static_cast<int>(j)));
      // The survivors hear of the failure within a second and write their
      // flight recorders: give them that second before stopping them.
      wait_for_flight_recorders(
          recorder_dir, ranks, [&](int j) { return !set.status(j).exited; }, kRecorderGrace);
      set.stop_all(kFailureGrace, SIGTERM, user_hurries);
      // Ranks that failed on their own before we stopped them are worth a
      // line each: the first failure is not always the cause.
      for (std::size_t j = 0; j < set.size(); ++j)
        if (j != i && !set.status(j).ok() && !set.status(j).killed_by_us)
          std::cerr << "dtensor-run: rank " << o.global_rank(static_cast<int>(j))
                    << " also failed: " << set.status(j).describe() << "\n";
      print_flight_summary(std::cerr, recorder_dir, ranks);
      return failed.signal != 0 ? exit_code::kSignalBase + failed.signal : failed.code;
    }

    case launch::Outcome::DeadlinePassed:
      std::cerr << "dtensor-run: the deadline of " << o.deadline->count() / 1000.0
                << " s passed; stopping ranks " << still_running() << std::endl;
      set.stop_all(kFailureGrace, SIGTERM, user_hurries);
      return exit_code::kDeadline;

    case launch::Outcome::Interrupted: {
      const int sig = g_signal;
      const int count = g_signal_count;
      std::cerr << "dtensor-run: got " << signal_name(sig) << "; forwarding it to the ranks"
                << std::endl;
      set.stop_all(kSignalGrace, sig, [count] { return g_signal_count > count; });
      return exit_code::kSignalBase + sig;
    }
  }
  return exit_code::kLauncher;  // unreachable
}

}  // namespace
}  // namespace dtensor::run

int main(int argc, char** argv) {
  using namespace dtensor::run;
  Options options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::cerr << "dtensor-run: " << e.what() << "\n"
              << usage_line() << "\nTry 'dtensor-run --help' for more information.\n";
    return exit_code::kUsage;
  }
  if (options.help) {
    std::cout << help_text();
    return exit_code::kOk;
  }
  if (const int rc = check_program(options.command[0])) return rc;
  install_signal_handlers();
  try {
    return run_job(options);
  } catch (const std::exception& e) {
    // Destructors have stopped any ranks started and removed the private store.
    std::cerr << "dtensor-run: " << e.what() << std::endl;
    return exit_code::kLauncher;
  }
}
