// init_process_group warns, once, when the ranks on this host times each
// rank's OpenMP threads exceed the cores the process may run on. The oracle:
// the cores counted here with sched_getaffinity, and the arithmetic by hand.
#include <sched.h>

#include <spdlog/sinks/ostream_sink.h>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "dtensor/core/distributed.h"
#include "dtensor/core/logging.h"

namespace {

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  return CPU_COUNT(&set);
}

// What one single-rank init_process_group logs with these variables set.
std::string init_logs(const std::string& local_world_size, const char* omp_threads) {
  for (const char* v :
       {"DTENSOR_RANK", "DTENSOR_WORLD_SIZE", "DTENSOR_LOCAL_RANK", "DTENSOR_STORE", "RANK",
        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    unsetenv(v);
  setenv("DTENSOR_LOG_LEVEL", "warn", 1);
  setenv("DTENSOR_LOCAL_WORLD_SIZE", local_world_size.c_str(), 1);
  if (omp_threads)
    setenv("OMP_NUM_THREADS", omp_threads, 1);
  else
    unsetenv("OMP_NUM_THREADS");
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto& sinks = dtensor::log::logger()->sinks();
  sinks.push_back(sink);
  dtensor::init_process_group();
  dtensor::destroy_process_group();
  sinks.pop_back();
  return out.str();
}

}  // namespace

TEST_CASE("init warns once when ranks x threads exceed the cores", "[init]") {
  const int n = cores();
  if (n < 2) {
    WARN("SKIPPED: one core, so OpenMP's default is one thread and nothing is to be warned of");
    return;
  }
  // n ranks of 1 thread fit; n + 1 of 1 thread are more ranks than cores,
  // which fewer threads cannot help: no warning either.
  CHECK(init_logs(std::to_string(n), "1").find("threads") == std::string::npos);
  CHECK(init_logs(std::to_string(n + 1), "1").find("threads") == std::string::npos);
  // 2 ranks with OpenMP's default, a thread per core each: 2n threads.
  const std::string warned = init_logs("2", nullptr);
  INFO(warned);
  CHECK(warned.find("2 ranks on this host (DTENSOR_LOCAL_WORLD_SIZE) x " + std::to_string(n) +
                    " threads each") != std::string::npos);
  CHECK(warned.find("= " + std::to_string(2 * n) + " threads on " + std::to_string(n) + " cores") !=
        std::string::npos);
  CHECK(warned.find("OMP_NUM_THREADS to at most " + std::to_string(n / 2 > 0 ? n / 2 : 1)) !=
        std::string::npos);
  // Once per process.
  CHECK(init_logs("2", "8,2").find("threads") == std::string::npos);
}
