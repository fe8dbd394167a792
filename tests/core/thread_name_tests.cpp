// The library's threads carry names a user can tell apart (top -H, gdb):
// read back from the kernel, /proc/self/task/*/comm.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

std::multiset<std::string> thread_names() {
  std::multiset<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names.insert(name);
  }
  return names;
}

}  // namespace

DTENSOR_TEST_CASE("a rank's library threads are named after what they do", "[threads]", 2) {
  world()->barrier();  // a barrier runs on the group's collective thread
  const auto names = thread_names();
  INFO("threads: " << [&] {
    std::string all;
    for (const auto& n : names)
      all += n + "; ";
    return all;
  }());
  CHECK(names.count("dtensor-monitor") >= 1);  // the fault monitor
  CHECK(names.count("dtensor-collect") >= 1);  // the world group's collective thread
  CHECK(names.count("dtensor-gloo") >= 1);     // Gloo's event loop
  CHECK(names.count("dtensor-record") == 1);   // the flight recorder's SIGUSR1 writer
}
