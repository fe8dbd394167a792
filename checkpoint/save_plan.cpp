#include "checkpoint/save_plan.h"

#include <algorithm>

namespace dtensor::checkpoint {

std::vector<PlannedShard> plan_shards(const DTensorSpec& spec) {
  const DeviceMesh& mesh = spec.mesh();
  std::vector<PlannedShard> shards;
  std::vector<std::int64_t> coord(static_cast<std::size_t>(mesh.ndim()), 0);
  for (std::int64_t i = 0; i < mesh.size(); ++i) {
    // Row-major coordinate of the i-th rank of the mesh.
    std::int64_t rest = i;
    for (std::int64_t d = mesh.ndim() - 1; d >= 0; --d) {
      coord[d] = rest % mesh.size(d);
      rest /= mesh.size(d);
    }
    Box box{spec.global_offset_at(coord), spec.local_shape_at(coord)};
    if (shape_numel(box.extents) == 0) continue;
    const int rank = mesh.rank_at(coord);
    auto same = std::find_if(shards.begin(), shards.end(), [&](const PlannedShard& s) {
      return s.box.offsets == box.offsets && s.box.extents == box.extents;
    });
    if (same == shards.end())
      shards.push_back({std::move(box), rank});
    else
      same->owner = std::min(same->owner, rank);
  }
  return shards;
}

}  // namespace dtensor::checkpoint
