// The seeds of a run's tensors, derived from --seed: the same for every
// number of ranks, and decorrelated from each other (both tools' data).
#pragma once

#include <cstdint>

namespace dtensor::cli {

/// One seed per tensor, derived from --seed so that they differ from each other.
struct Seeds {
  std::uint64_t input = 0, weight = 0, bias = 0, grad_output = 0;
  static Seeds from(std::uint64_t seed);
};

}  // namespace dtensor::cli
