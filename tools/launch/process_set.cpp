#include "tools/launch/process_set.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace dtensor::launch {

std::string ExitStatus::describe() const {
  if (!exited) return "still running";
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return "killed by signal " + std::to_string(signal) +
           (name ? std::string(" (SIG") + name + ")" : "") +
           (killed_by_us ? " after the job was stopped" : "");
  }
  return "exit code " + std::to_string(code);
}

ProcessSet::~ProcessSet() {
  if (!all_exited()) stop_all(std::chrono::milliseconds(2000));
  for (auto& p : procs_) {
    for (Stream* s : {&p.out, &p.err})
      if (s->fd >= 0) close(s->fd);
    if (p.exit_fd >= 0) close(p.exit_fd);
  }
}

namespace {

// A pipe whose read end we keep (non-blocking, close-on-exec so that later
// children do not inherit it and keep it open).
void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + std::string(strerror(errno)));
}

}  // namespace

void ProcessSet::start(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw std::runtime_error("ProcessSet::start: empty argv");
  // Build argv/envp before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos && spec.env.count(kv.substr(0, eq))) continue;
    env_strings.push_back(std::move(kv));
  }
  for (auto& [k, v] : spec.env)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = spec.argv;
  for (auto& s : argv_copy)
    argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  int file_fd = -1;
  if (spec.output_file.empty()) {
    make_pipe(out_pipe);
    if (spec.separate_stderr) {
      try {
        make_pipe(err_pipe);
      } catch (...) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        throw;
      }
    }
  } else {
    file_fd = open(spec.output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_fd < 0) throw std::runtime_error("open " + spec.output_file + ": " + strerror(errno));
  }
  auto close_all = [&] {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], file_fd})
      if (fd >= 0) close(fd);
  };
  // Built before fork: the child only calls async-signal-safe functions.
  cpu_set_t cpu_mask;
  CPU_ZERO(&cpu_mask);
  for (int c : spec.cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpu_mask);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    throw std::runtime_error("fork: " + std::string(strerror(e)));
  }
  if (pid == 0) {
    // A rank must never outlive the process that watches it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int out = file_fd >= 0 ? file_fd : out_pipe[1];
    const int err = err_pipe[1] >= 0 ? err_pipe[1] : out;
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    if (!spec.cpus.empty() && sched_setaffinity(0, sizeof cpu_mask, &cpu_mask) != 0) {
      const char msg[] = "dtensor: cannot bind to the given CPUs\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(125);
    }
    execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "dtensor: exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  Proc p;
  p.pid = pid;
  // Lets poll() wake the moment the process exits: its pipes close a little
  // before it can be reaped, and a rank may have closed them long before.
  // Without pidfds (Linux < 5.3) poll() looks again every few milliseconds.
  // (pidfd_open sets close-on-exec itself.)
  p.exit_fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  p.prefix = spec.line_prefix;
  if (file_fd >= 0) close(file_fd);
  auto keep_read_end = [](int fds[2], Stream& s, bool to_stderr) {
    if (fds[0] < 0) return;
    close(fds[1]);
    s.fd = fds[0];
    s.to_stderr = to_stderr;
    fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) | O_NONBLOCK);
  };
  keep_read_end(out_pipe, p.out, false);
  keep_read_end(err_pipe, p.err, true);
  procs_.push_back(std::move(p));
}

void ProcessSet::drain(Proc& p, Stream& s, bool final) {
  if (s.fd < 0 && s.pending.empty()) return;
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.pending.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) {  // EOF
      close(s.fd);
      s.fd = -1;
      final = true;
    }
    break;
  }
  std::size_t start = 0, nl;
  std::string out;
  while ((nl = s.pending.find('\n', start)) != std::string::npos) {
    out += p.prefix;
    out.append(s.pending, start, nl - start + 1);
    start = nl + 1;
  }
  s.pending.erase(0, start);
  // A process that writes a lot without a newline (progress bars) would make
  // us buffer without bound; past 64 KiB it is shown as a line of its own.
  if ((final || s.pending.size() > 65536) && !s.pending.empty()) {
    out += p.prefix + s.pending + "\n";
    s.pending.clear();
  }
  if (!out.empty()) {
    std::ostream& sink = s.to_stderr ? std::cerr : std::cout;
    sink << out;
    sink.flush();
  }
}

std::optional<std::size_t> ProcessSet::poll(std::chrono::milliseconds budget) {
  std::vector<pollfd> fds;
  bool unwatched_exit = false;  // a running process without a pidfd
  for (auto& p : procs_) {
    for (Stream* s : {&p.out, &p.err})
      if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0});
    if (p.status.exited) continue;
    if (p.exit_fd >= 0)
      fds.push_back({p.exit_fd, POLLIN, 0});
    else
      unwatched_exit = true;
  }
  const int ms = static_cast<int>(std::min<std::int64_t>(budget.count(), unwatched_exit ? 5 : 50));
  if (!fds.empty())
    ::poll(fds.data(), fds.size(), ms);
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::optional<std::size_t> failed;
  for (std::size_t i = 0; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
    drain(p, p.out, false);
    drain(p, p.err, false);
    if (p.status.exited) continue;
    int st = 0;
    pid_t r = waitpid(p.pid, &st, WNOHANG);
    if (r == p.pid) {
      p.status.exited = true;
      if (p.exit_fd >= 0) close(p.exit_fd);
      p.exit_fd = -1;
      if (WIFEXITED(st)) p.status.code = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) p.status.signal = WTERMSIG(st);
      // Everything it wrote is in the pipe now; a partial last line is shown
      // at end of file, not cut here (a child of the rank may still finish it).
      drain(p, p.out, false);
      drain(p, p.err, false);
    }
    if (p.status.exited && !p.status.ok() && !p.reported) {
      p.reported = true;
      if (!failed) failed = i;
    }
  }
  return failed;
}

bool ProcessSet::all_exited() const {
  for (auto& p : procs_)
    if (!p.status.exited) return false;
  return true;
}

void ProcessSet::signal_all(int sig) {
  for (auto& p : procs_)
    if (!p.status.exited) kill(p.pid, sig);
}

void ProcessSet::stop_all(std::chrono::milliseconds grace, int first_signal,
                          const std::function<bool()>& hurry) {
  for (auto& p : procs_)
    if (!p.status.exited) {
      p.status.killed_by_us = true;
      p.reported = true;  // a rank we stopped is not "the" failure
      kill(p.pid, first_signal);
    }
  const auto until = std::chrono::steady_clock::now() + grace;
  while (!all_exited() && std::chrono::steady_clock::now() < until && !(hurry && hurry()))
    poll(std::chrono::milliseconds(20));
  for (auto& p : procs_)
    if (!p.status.exited) kill(p.pid, SIGKILL);
  while (!all_exited())
    poll(std::chrono::milliseconds(20));
  finish_output(std::chrono::milliseconds(1000));
}

bool ProcessSet::wait_exited(std::chrono::milliseconds budget, const std::function<bool()>& hurry) {
  const auto until = std::chrono::steady_clock::now() + budget;
  while (!all_exited() && std::chrono::steady_clock::now() < until && !(hurry && hurry()))
    poll(std::chrono::milliseconds(20));
  return all_exited();
}

void ProcessSet::finish_output(std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  auto open_streams = [&] {
    for (auto& p : procs_)
      if (p.out.fd >= 0 || p.err.fd >= 0) return true;
    return false;
  };
  while (open_streams() && std::chrono::steady_clock::now() < until) {
    std::vector<pollfd> fds;
    for (auto& p : procs_)
      for (Stream* s : {&p.out, &p.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 20);
    for (auto& p : procs_) {
      drain(p, p.out, false);
      drain(p, p.err, false);
    }
  }
  for (auto& p : procs_)
    for (Stream* s : {&p.out, &p.err}) {
      drain(p, *s, true);
      if (s->fd >= 0) close(s->fd);
      s->fd = -1;
    }
}

WaitResult wait_for(ProcessSet& set, std::chrono::steady_clock::time_point deadline,
                    const std::function<bool()>& interrupted) {
  while (true) {
    const auto failed = set.poll(std::chrono::milliseconds(50));
    // Checked before a failure: when Ctrl-C reaches the ranks and us together,
    // the ranks dying of it are a consequence, not the cause.
    if (interrupted && interrupted()) return {Outcome::Interrupted, 0};
    if (failed) return {Outcome::RankFailed, *failed};
    if (set.all_exited()) {
      set.finish_output(std::chrono::milliseconds(1000));
      return {Outcome::AllSucceeded, 0};
    }
    if (std::chrono::steady_clock::now() >= deadline) return {Outcome::DeadlinePassed, 0};
  }
}

TempDir::TempDir(const std::string& stem) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + stem + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + ": " + strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace dtensor::launch
