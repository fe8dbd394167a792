// Settings written by hand ("cpu:gloo, cuda:nccl", "latency_us=500, gbit=10")
// often carry a space after a comma, and files the kernel writes (a cgroup's
// "200000 100000\n") end in a newline; their parsers read each item without
// the white space around it, so it is not part of a name or a number.
#pragma once

#include <string_view>

namespace dtensor::detail {

/// `s` without the spaces, tabs and line ends around it.
inline std::string_view trim_spaces(std::string_view s) {
  constexpr std::string_view kWhite = " \t\r\n";
  const auto begin = s.find_first_not_of(kWhite);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kWhite) - begin + 1);
}

}  // namespace dtensor::detail
