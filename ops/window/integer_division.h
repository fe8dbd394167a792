// Division that rounds toward -infinity or +infinity, for b > 0. C++ division
// truncates toward zero, which for a negative numerator (an input slightly
// too short, a window reaching left of 0) is off by one.
#pragma once

#include <cstdint>

namespace dtensor::window {

inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return -floor_div(-a, b);
}

}  // namespace dtensor::window
