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
  return detail::combine_rows(
      mesh_ndim, rows,
      [](const Placement& a, const Placement& b) {
        return a.is_shard() && b.is_shard() && a.dim() == b.dim();
      },
      [inputs](const std::vector<const Placement*>& pick) {
        Placements p;
        for (const Placement* q : pick)
          p.push_back(*q);
        return ShardingStrategy{std::vector<Placements>(inputs, p), {p}};
      });
}

}  // namespace dtensor::window
