// The median the benchmarks report (the mean of the middle two of an even
// count), shared by every program in bench/.
#pragma once

#include <algorithm>
#include <vector>

namespace dtensor::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace dtensor::bench
