#include "tools/dtensor-run/flight_summary.h"

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace dtensor::run {
namespace {

namespace fs = std::filesystem;

// The library's name for rank R's file (core/detail/flight_recorder.h).
std::string file_of(const std::string& dir, int rank) {
  return dir + "/dtensor-flight-rank" + std::to_string(rank) + ".txt";
}

// "seq call op group peer bytes state start end duration" -> a short line.
std::string describe(const std::string& entry) {
  std::istringstream in(entry);
  std::string seq, call, op, group, peer, bytes, state, start, end, duration;
  if (!(in >> seq >> call >> op >> group >> peer >> bytes >> state >> start >> end >> duration))
    return entry;
  std::string s = "call " + call + ": " + op + " on " + group;
  if (peer != "all") s += " with rank " + peer;
  s += ", " + bytes + " bytes, " + state;
  s += state == "started" ? " (pending for " + duration + " s)" : " in " + duration + " s";
  return s;
}

}  // namespace

std::string point_flight_recorders(const std::string& job_dir,
                                   std::map<std::string, std::string>& env) {
  // The launcher does not link the library (and its Config): it only needs
  // to know whether the user chose a directory, which the ranks inherit.
  const char* chosen = std::getenv("DTENSOR_FLIGHT_RECORDER_DIR");
  if (chosen && *chosen) return chosen;
  std::string dir = job_dir + "/flight";
  env["DTENSOR_FLIGHT_RECORDER_DIR"] = dir;
  return dir;
}

void wait_for_flight_recorders(const std::string& dir, const std::vector<int>& ranks,
                               const std::function<bool(int)>& running,
                               std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      all = all && (!running(static_cast<int>(i)) || fs::exists(file_of(dir, ranks[i])));
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void print_flight_summary(std::ostream& out, const std::string& dir, const std::vector<int>& ranks,
                          std::size_t tail) {
  for (int rank : ranks) {
    std::ifstream in(file_of(dir, rank));
    if (!in) continue;
    std::deque<std::string> last;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      last.push_back(line);
      if (last.size() > tail) last.pop_front();
    }
    out << "dtensor-run: rank " << rank << "'s last communication calls (" << file_of(dir, rank)
        << "):\n";
    if (last.empty()) out << "  (none)\n";
    for (const auto& entry : last)
      out << "  " << describe(entry) << "\n";
  }
}

}  // namespace dtensor::run
