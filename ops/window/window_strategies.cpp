#include "ops/window/window_strategies.h"

#include "ops/detail/combinations.h"

namespace dtensor::window {

std::vector<ShardingStrategy> per_channel_strategies(std::int64_t mesh_ndim, std::int64_t ndim,
                                                     std::size_t inputs, bool linear) {
  std::vector<Placement> rows;
  for (std::int64_t d = 0; d < ndim; ++d)
    rows.push_back(Shard(d));
  rows.push_back(Replicate());
  if (linear && inputs == 1) rows.push_back(Partial());
  std::vector<ShardingStrategy> out;
  detail::for_each_combination(mesh_ndim, rows.size(), [&](const std::vector<std::size_t>& idx) {
    Placements pick;
    for (std::int64_t m = 0; m < mesh_ndim; ++m) {
      const Placement& p = rows[idx[static_cast<std::size_t>(m)]];
      for (const Placement& q : pick)
        if (p.is_shard() && q.is_shard() && p.dim() == q.dim()) return;
      pick.push_back(p);
    }
    out.push_back({std::vector<Placements>(inputs, pick), {pick}});
  });
  return out;
}

}  // namespace dtensor::window
