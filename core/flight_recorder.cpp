#include "core/detail/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include <fmt/format.h>

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
