// spdlog-based logging. Every line carries the rank ("[dtensor r3] ..."), the
// level comes from DTENSOR_LOG_LEVEL (trace, debug, info, warn, error, off;
// default warn) so a quiet library stays quiet unless asked.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace dtensor::log {

/// The library's logger (created on first use).
std::shared_ptr<spdlog::logger> logger();
/// Sets the rank shown in every line (called by init_process_group).
void set_rank(int rank);
/// Re-reads DTENSOR_LOG_LEVEL.
void reload_level_from_env();

template <typename... Args>
void trace(spdlog::format_string_t<Args...> f, Args&&... a) {
  logger()->trace(f, std::forward<Args>(a)...);
}
template <typename... Args>
void debug(spdlog::format_string_t<Args...> f, Args&&... a) {
  logger()->debug(f, std::forward<Args>(a)...);
}
template <typename... Args>
void info(spdlog::format_string_t<Args...> f, Args&&... a) {
  logger()->info(f, std::forward<Args>(a)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> f, Args&&... a) {
  logger()->warn(f, std::forward<Args>(a)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> f, Args&&... a) {
  logger()->error(f, std::forward<Args>(a)...);
}

}  // namespace dtensor::log
