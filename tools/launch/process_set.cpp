#include "tools/launch/process_set.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
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
  for (auto& p : procs_)
    if (p.out_fd >= 0) close(p.out_fd);
}

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

  int pipefd[2] = {-1, -1};
  int file_fd = -1;
  if (spec.output_file.empty()) {
    if (pipe2(pipefd, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  } else {
    file_fd = open(spec.output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_fd < 0) throw std::runtime_error("open " + spec.output_file + ": " + strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork: " + std::string(strerror(errno)));
  if (pid == 0) {
    // A rank must never outlive the process that watches it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int out = file_fd >= 0 ? file_fd : pipefd[1];
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "dtensor: exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  Proc p;
  p.pid = pid;
  p.prefix = spec.line_prefix;
  if (file_fd >= 0) {
    close(file_fd);
  } else {
    close(pipefd[1]);
    p.out_fd = pipefd[0];
    fcntl(p.out_fd, F_SETFL, fcntl(p.out_fd, F_GETFL) | O_NONBLOCK);
  }
  procs_.push_back(std::move(p));
}

void ProcessSet::drain(Proc& p, bool final) {
  if (p.out_fd < 0) return;
  char buf[65536];
  while (true) {
    ssize_t n = read(p.out_fd, buf, sizeof(buf));
    if (n > 0) {
      p.pending.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) {  // EOF
      close(p.out_fd);
      p.out_fd = -1;
      final = true;
    }
    break;
  }
  std::size_t start = 0, nl;
  std::string out;
  while ((nl = p.pending.find('\n', start)) != std::string::npos) {
    out += p.prefix;
    out.append(p.pending, start, nl - start + 1);
    start = nl + 1;
  }
  p.pending.erase(0, start);
  if (final && !p.pending.empty()) {
    out += p.prefix + p.pending + "\n";
    p.pending.clear();
  }
  if (!out.empty()) {
    std::cout << out;
    std::cout.flush();
  }
}

std::optional<std::size_t> ProcessSet::poll(std::chrono::milliseconds budget) {
  std::vector<pollfd> fds;
  for (auto& p : procs_)
    if (p.out_fd >= 0) fds.push_back({p.out_fd, POLLIN, 0});
  const int ms = static_cast<int>(std::min<std::int64_t>(budget.count(), 50));
  if (!fds.empty())
    ::poll(fds.data(), fds.size(), ms);
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::optional<std::size_t> failed;
  for (std::size_t i = 0; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
    drain(p, false);
    if (p.status.exited) continue;
    int st = 0;
    pid_t r = waitpid(p.pid, &st, WNOHANG);
    if (r == p.pid) {
      p.status.exited = true;
      if (WIFEXITED(st)) p.status.code = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) p.status.signal = WTERMSIG(st);
      drain(p, true);
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

void ProcessSet::stop_all(std::chrono::milliseconds grace) {
  for (auto& p : procs_)
    if (!p.status.exited) {
      p.status.killed_by_us = true;
      p.reported = true;  // a rank we stopped is not "the" failure
      kill(p.pid, SIGTERM);
    }
  const auto until = std::chrono::steady_clock::now() + grace;
  while (!all_exited() && std::chrono::steady_clock::now() < until)
    poll(std::chrono::milliseconds(20));
  for (auto& p : procs_)
    if (!p.status.exited) kill(p.pid, SIGKILL);
  while (!all_exited())
    poll(std::chrono::milliseconds(20));
}

WaitResult wait_for(ProcessSet& set, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    if (auto f = set.poll(std::chrono::milliseconds(50))) return {Outcome::RankFailed, *f};
    if (set.all_exited()) return {Outcome::AllSucceeded, 0};
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
