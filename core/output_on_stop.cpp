#include "core/detail/output_on_stop.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "core/detail/thread_name.h"

namespace dtensor::detail {
namespace {

// The SIGTERM handler may only do async-signal-safe things, and fflush is
// not one (it takes the stream's lock, which the interrupted thread may
// hold). So the handler writes a byte to a pipe, and a thread that waits on
// it flushes, restores the default action and sends SIGTERM again.
int g_wake_fd = -1;

extern "C" void on_sigterm(int) {
  const int saved = errno;
  const char b = 1;
  (void)!write(g_wake_fd, &b, 1);
  errno = saved;
}

void flusher(int read_fd) {
  detail::name_this_thread("dtensor-flusher");
  char b;
  while (read(read_fd, &b, 1) < 0 && errno == EINTR) {
  }
  std::fflush(nullptr);
  signal(SIGTERM, SIG_DFL);
  kill(getpid(), SIGTERM);  // to the process: whichever thread takes it ends it
}

void flush_on_sigterm() {
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
      (current.sa_flags & SA_SIGINFO))
    return;  // the program's own handler (or SIG_IGN) stays
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  g_wake_fd = fds[1];
  std::thread(flusher, fds[0]).detach();
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  // A child made by fork() has no flusher thread: there SIGTERM goes back to
  // its default, or the child could not be stopped.
  pthread_atfork(nullptr, nullptr, [] { signal(SIGTERM, SIG_DFL); });
}

std::terminate_handler g_previous_terminate = nullptr;

void flush_on_terminate() {
  g_previous_terminate = std::set_terminate([] {
    std::fflush(nullptr);  // what the rank printed comes before its error
    if (g_previous_terminate) g_previous_terminate();
    std::abort();
  });
}

bool stdout_is_pipe() {
  struct stat st {};
  return fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

void protect_output(const Config& cfg) {
  using B = Config::StdoutBuffering;
  // Line by line under a launcher: a rank killed outright (SIGKILL, a crash)
  // still loses no finished line, and ranks' lines arrive as they are printed.
  if (cfg.stdout_buffering == B::Line || (cfg.stdout_buffering == B::Auto && stdout_is_pipe()))
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!cfg.flush_on_stop) return;
  static std::once_flag once;
  std::call_once(once, [] {
    flush_on_sigterm();
    flush_on_terminate();
  });
}

}  // namespace dtensor::detail
