// Enumerating one choice per mesh dim: the propagator expands per-mesh-dim
// signatures this way, and so does the convolution's strategy table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtensor::detail {

/// Calls fn(idx) for every idx in [0, choices)^slots, the first slot varying
/// slowest: a fixed order, so every rank enumerates (and breaks ties) alike.
template <typename Fn>
void for_each_combination(std::int64_t slots, std::size_t choices, Fn&& fn) {
  if (choices == 0) return;
  std::vector<std::size_t> idx(static_cast<std::size_t>(slots), 0);
  while (true) {
    fn(static_cast<const std::vector<std::size_t>&>(idx));
    std::int64_t m = slots - 1;
    for (; m >= 0; --m) {
      if (++idx[m] < choices) break;
      idx[m] = 0;
    }
    if (m < 0) return;
  }
}

}  // namespace dtensor::detail
