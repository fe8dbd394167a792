// Settings written by hand ("cpu:gloo, cuda:nccl", "latency_us=500, gbit=10")
// often carry a space after a comma; their parsers read each item without the
// spaces around it, so the space is not part of a name.
#pragma once

#include <string_view>

namespace dtensor::detail {

inline std::string_view trim_spaces(std::string_view s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ')
    s.remove_suffix(1);
  return s;
}

}  // namespace dtensor::detail
