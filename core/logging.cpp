#include "dtensor/core/logging.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"

namespace dtensor::log {
namespace {

std::atomic<int> g_rank{-1};

// The configured level; a bad DTENSOR_LOG_LEVEL leaves "warn" here (logging
// must not throw) and is reported by init_process_group, which reads the
// configuration unguarded.
spdlog::level::level_enum level_from_env() {
  try {
    return spdlog::level::from_str(config().log_level);
  } catch (const Error&) {
    return spdlog::level::warn;
  }
}

void apply_pattern(spdlog::logger& l) {
  const int r = g_rank.load();
  // Rank in every line: logs of many processes interleave on one terminal.
  l.set_pattern(r >= 0 ? fmt::format("[%H:%M:%S.%e] [dtensor r{}] [%l] %v", r)
                       : std::string("[%H:%M:%S.%e] [dtensor] [%l] %v"));
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto lg = spdlog::stderr_color_mt("dtensor");
    lg->set_level(level_from_env());
    apply_pattern(*lg);
    return lg;
  }();
  return l;
}

void set_rank(int rank) {
  g_rank = rank;
  apply_pattern(*logger());
}

void reload_level_from_env() {
  logger()->set_level(level_from_env());
}

}  // namespace dtensor::log
