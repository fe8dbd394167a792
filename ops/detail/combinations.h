// Enumerating one choice per mesh dim: the propagator expands per-mesh-dim
// signatures this way, and so do the convolutions' strategy tables.
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

/// One row per mesh dim, every combination (mesh dim 0 slowest), minus those
/// in which two mesh dims' rows `conflict` (e.g. shard one spatial dim
/// twice); `build(rows)` turns each kept combination into a strategy.
template <typename Row, typename Conflict, typename Build>
auto combine_rows(std::int64_t mesh_ndim, const std::vector<Row>& rows, Conflict conflict,
                  Build build) {
  std::vector<decltype(build(std::vector<const Row*>{}))> out;
  for_each_combination(mesh_ndim, rows.size(), [&](const std::vector<std::size_t>& idx) {
    std::vector<const Row*> pick;
    for (std::int64_t m = 0; m < mesh_ndim; ++m) {
      const Row* r = &rows[idx[static_cast<std::size_t>(m)]];
      for (const Row* prev : pick)
        if (conflict(*r, *prev)) return;
      pick.push_back(r);
    }
    out.push_back(build(pick));
  });
  return out;
}

}  // namespace dtensor::detail
