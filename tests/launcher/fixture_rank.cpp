// A stand-in for a rank program, driven by its arguments, for the launcher's
// tests. Plain C++ on purpose: the tests must not depend on libdtensor's
// process group. Arguments are steps, run in order:
//   env             print the DTENSOR_* variables (one stdout line, one stderr line)
//   pid             print "pid=<pid>" (tests check later that it is gone)
//   barrier         wait until every rank of this node has reached it (files in the store)
//   ready           print "ready"
//   trap-term CODE  on SIGTERM or SIGINT print "got <signal>" and exit with CODE
//   ignore-term     ignore SIGTERM (the launcher must fall back to SIGKILL)
//   exit-on R CODE  exit with CODE on rank R
//   kill-on R SIG   kill itself with signal SIG on rank R
//   sleep S         sleep S seconds
//   touch PATH      create PATH
//   cpus            print "cpus=<rank>:c,c,..." (the CPUs it may run on)
//   omp             print "omp=<OMP_NUM_THREADS>"
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

int rank() {
  return std::atoi(env("DTENSOR_RANK").c_str());
}

volatile std::sig_atomic_t g_trap_code = 0;

extern "C" void on_term(int sig) {
  // Only async-signal-safe calls here.
  const char* msg = sig == SIGTERM ? "got SIGTERM\n" : "got SIGINT\n";
  (void)!write(STDOUT_FILENO, msg, std::strlen(msg));
  _exit(g_trap_code);
}

// Every local rank creates a file in the store directory and waits for the
// others' files, so that a test can know all ranks reached a point.
void barrier() {
  const std::string store = env("DTENSOR_STORE");
  const std::filesystem::path dir = store.rfind("file:", 0) == 0 ? store.substr(5) : store;
  const std::string world = env("DTENSOR_WORLD_SIZE");
  std::ofstream(dir / ("fixture-ready-" + env("DTENSOR_RANK"))).put('\n');
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(dir))
      n += e.path().filename().string().rfind("fixture-ready-", 0) == 0;
    if (n >= std::atoi(world.c_str())) return;
    if (std::chrono::steady_clock::now() > give_up) {
      std::fprintf(stderr, "fixture: barrier timed out\n");
      std::exit(99);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Output goes to a pipe: flush every line so that tests see it as it happens.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    const std::string step = argv[i];
    auto arg = [&](int k) -> const char* {
      if (i + k >= argc) {
        std::fprintf(stderr, "fixture: %s needs %d argument(s)\n", step.c_str(), k);
        std::exit(100);
      }
      return argv[i + k];
    };
    if (step == "env") {
      std::printf("rank=%s world=%s local=%s store=%s timeout=%s\n", env("DTENSOR_RANK").c_str(),
                  env("DTENSOR_WORLD_SIZE").c_str(), env("DTENSOR_LOCAL_RANK").c_str(),
                  env("DTENSOR_STORE").c_str(), env("DTENSOR_TIMEOUT").c_str());
      std::fprintf(stderr, "on stderr from %s\n", env("DTENSOR_RANK").c_str());
    } else if (step == "pid") {
      std::printf("pid=%d\n", static_cast<int>(getpid()));
    } else if (step == "barrier") {
      barrier();
    } else if (step == "ready") {
      std::printf("ready\n");
    } else if (step == "trap-term") {
      g_trap_code = std::atoi(arg(1));
      ++i;
      std::signal(SIGTERM, on_term);
      std::signal(SIGINT, on_term);
    } else if (step == "ignore-term") {
      std::signal(SIGTERM, SIG_IGN);
    } else if (step == "exit-on") {
      const int r = std::atoi(arg(1)), code = std::atoi(arg(2));
      i += 2;
      if (rank() == r) return code;
    } else if (step == "kill-on") {
      const int r = std::atoi(arg(1)), sig = std::atoi(arg(2));
      i += 2;
      if (rank() == r) raise(sig);
    } else if (step == "sleep") {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg(1))));
      ++i;
    } else if (step == "cpus") {
      cpu_set_t set;
      CPU_ZERO(&set);
      std::string list;
      if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
      std::printf("cpus=%d:%s\n", rank(), list.c_str());
    } else if (step == "omp") {
      std::printf("omp=%s\n", env("OMP_NUM_THREADS").c_str());
    } else if (step == "touch") {
      std::ofstream(arg(1)).put('\n');
      ++i;
    } else {
      std::fprintf(stderr, "fixture: unknown step '%s'\n", step.c_str());
      return 100;
    }
  }
  return 0;
}
