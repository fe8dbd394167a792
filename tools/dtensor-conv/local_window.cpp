#include "tools/dtensor-conv/local_window.h"

#include <set>

#include "dtensor/placement/chunk.h"
#include "ops/window/halo_plan.h"

namespace dtensor::conv_cli {

LocalWindow local_window(const Shape& input, const Shape& weight, const ConvParams& params,
                         const Shape& mesh, const Placements& placements,
                         const std::vector<std::int64_t>& coordinate) {
  LocalWindow w{input, params, true};
  std::set<std::int64_t> windowed;  // spatial dims already replaced by a window
  for (std::size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (!p.is_shard()) continue;
    const std::int64_t d = p.dim();
    if (d == 0) {
      w.input[0] = chunk_extent(w.input[0], mesh[i], coordinate[i]).length;
      if (w.input[0] == 0) w.computes = false;
    } else if (d >= 2 && windowed.insert(d).second) {
      const std::size_t s = static_cast<std::size_t>(d - 2);
      HaloGeometry g;
      g.length = input[d];
      g.ranks = mesh[i];
      g.kernel = weight[d];
      g.stride = params.stride[s];
      g.dilation = params.dilation[s];
      g.pad_left = params.padding[s].first;
      g.pad_right = params.padding[s].second;
      const HaloPlan plan(g);
      const HaloRankPlan& r = plan.rank(coordinate[i]);
      if (!r.has_output) {
        w.computes = false;
        continue;
      }
      w.input[d] = r.window.length;
      w.params.padding[s] = {r.pad_left, r.pad_right};
    }
  }
  return w;
}

}  // namespace dtensor::conv_cli
