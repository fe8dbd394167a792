// A setting's or a kernel file's number read whole: "12" is 12, "12x", "",
// "1 2" are not numbers (std::from_chars alone would take the "12" of
// "12x"). Header-only: dtensor-run, which does not link the library, reads
// cgroup files with it too (core/detail/cpu_budget.h).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dtensor::detail {

/// The whole of `s` as a decimal integer; nullopt if it is not one.
inline std::optional<std::int64_t> whole_integer(std::string_view s) {
  std::int64_t out = 0;
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, out);
  if (ec != std::errc() || p != end) return std::nullopt;  // "" is invalid_argument
  return out;
}

}  // namespace dtensor::detail
