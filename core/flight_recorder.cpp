#include "core/detail/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/detail/thread_name.h"
#include "dtensor/core/logging.h"

namespace dtensor::detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Entry {
  std::uint64_t id = 0;  // 1, 2, ...; 0: never used
  std::array<char, 48> op{};
  std::array<char, 24> group{};
  int peer = -1;
  std::uint64_t bytes = 0;
  std::uint64_t call = 0;
  FlightRecorder::State state = FlightRecorder::State::Started;
  Clock::time_point started, finished;
};

struct Ring {
  std::mutex mutex;
  std::vector<Entry> entries;
  std::uint64_t next_id = 1;
  int rank = 0;
  Clock::time_point origin = Clock::now();
};
Ring& ring() {
  static auto* r = new Ring();  // never destroyed: a failing rank may dump during exit
  return *r;
}

template <std::size_t N>
void copy_text(std::array<char, N>& dst, std::string_view src) {
  const std::size_t n = std::min(src.size(), N - 1);
  std::memcpy(dst.data(), src.data(), n);
  dst[n] = '\0';
}

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::Started:
      return "started";
    case FlightRecorder::State::Completed:
      return "completed";
    case FlightRecorder::State::Rejected:
      return "rejected";
    case FlightRecorder::State::Failed:
      return "failed";
  }
  return "?";
}

}  // namespace

void FlightRecorder::configure(std::size_t capacity, int rank) {
  Ring& r = ring();
  std::lock_guard lock(r.mutex);
  r.entries.assign(capacity, Entry{});
  r.next_id = 1;
  r.rank = rank;
  r.origin = Clock::now();
}

std::uint64_t FlightRecorder::start(std::string_view op, std::string_view group, int peer,
                                    std::uint64_t bytes, std::uint64_t call) {
  Ring& r = ring();
  const auto now = Clock::now();
  std::lock_guard lock(r.mutex);
  if (r.entries.empty()) return 0;
  const std::uint64_t id = r.next_id++;
  Entry& e = r.entries[id % r.entries.size()];
  e.id = id;
  copy_text(e.op, op);
  copy_text(e.group, group);
  e.peer = peer;
  e.bytes = bytes;
  e.call = call;
  e.state = State::Started;
  e.started = now;
  e.finished = {};
  return id;
}

void FlightRecorder::finish(std::uint64_t id, State state) {
  if (id == 0) return;
  Ring& r = ring();
  const auto now = Clock::now();
  std::lock_guard lock(r.mutex);
  if (r.entries.empty()) return;
  Entry& e = r.entries[id % r.entries.size()];
  if (e.id != id) return;  // overwritten by newer calls while it ran
  e.state = state;
  e.finished = now;
}

std::string FlightRecorder::text() {
  Ring& r = ring();
  std::lock_guard lock(r.mutex);
  std::vector<const Entry*> used;
  for (const Entry& e : r.entries)
    if (e.id != 0) used.push_back(&e);
  std::sort(used.begin(), used.end(), [](auto* a, auto* b) { return a->id < b->id; });
  const auto now = Clock::now();
  auto secs = [&](Clock::time_point t) {
    return std::chrono::duration<double>(t - r.origin).count();
  };
  std::string out = fmt::format(
      "# dtensor flight recorder, rank {}, pid {}, {:.3f} s after init, last {} of {} calls\n"
      "# seq call op group peer bytes state start_s end_s duration_s\n",
      r.rank, getpid(), secs(now), used.size(), r.next_id - 1);
  for (const Entry* e : used) {
    const bool done = e->state != State::Started;
    const double end = done ? secs(e->finished) : secs(now);
    out +=
        fmt::format("{} {} {} {} {} {} {} {:.6f} {} {:.6f}\n", e->id, e->call, e->op.data(),
                    e->group.data(), e->peer < 0 ? std::string("all") : std::to_string(e->peer),
                    e->bytes, state_name(e->state), secs(e->started),
                    done ? fmt::format("{:.6f}", end) : std::string("-"), end - secs(e->started));
  }
  return out;
}

std::string FlightRecorder::write_to(const std::string& dir) {
  int rank;
  {
    Ring& r = ring();
    std::lock_guard lock(r.mutex);
    if (r.entries.empty()) return "";
    rank = r.rank;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string path = dir + "/" + flight_recorder_file_name(rank);
  // Written aside and renamed: a reader (dtensor-run) never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text();
    if (!out) {
      log::warn("cannot write the flight recorder to {}", path);
      return "";
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    log::warn("cannot write the flight recorder to {}: {}", path, ec.message());
    return "";
  }
  return path;
}

std::string flight_recorder_file_name(int rank) {
  return fmt::format("dtensor-flight-rank{}.txt", rank);
}

}  // namespace dtensor::detail

namespace dtensor::detail {
namespace {

// The handler may only do async-signal-safe things: it writes a byte to a
// pipe, and a thread waiting on it writes the recorder.
int g_sigusr1_fd = -1;
std::mutex g_sigusr1_mutex;
std::string g_sigusr1_dir;  // under g_sigusr1_mutex

extern "C" void on_sigusr1(int) {
  const int saved = errno;
  const char b = 1;
  (void)!write(g_sigusr1_fd, &b, 1);
  errno = saved;
}

void write_on_request(int read_fd) {
  detail::name_this_thread("dtensor-record");
  char b;
  while (true) {
    const ssize_t n = read(read_fd, &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::string dir;
    {
      std::lock_guard lock(g_sigusr1_mutex);
      dir = g_sigusr1_dir;
    }
    const std::string path = FlightRecorder::write_to(dir);
    if (!path.empty()) log::warn("flight recorder written to {} (SIGUSR1)", path);
  }
}

}  // namespace

void FlightRecorder::write_on_sigusr1(const std::string& dir) {
  {
    std::lock_guard lock(g_sigusr1_mutex);
    g_sigusr1_dir = dir;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGUSR1, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO))
      return;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    g_sigusr1_fd = fds[1];
    std::thread(write_on_request, fds[0]).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  });
}

}  // namespace dtensor::detail
