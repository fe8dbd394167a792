// The propagator's cost model: bytes a rank moves to redistribute a spec,
// following the planner's steps. Rank 0's shard is the largest under the
// chunk rule, so its sizes stand for the slowest rank.
#include "dtensor/placement/redistribute_cost.h"

#include <limits>

#include "dtensor/core/errors.h"
#include "dtensor/placement/redistribute.h"

namespace dtensor {

double redistribute_cost_bytes(const DTensorSpec& src, const Placements& dst) {
  std::vector<RedistributeStep> steps;
  try {
    steps = plan_redistribute(src, dst);
  } catch (const InvalidArgument&) {
    return std::numeric_limits<double>::infinity();
  }
  const std::vector<std::int64_t> origin(static_cast<std::size_t>(src.mesh().ndim()), 0);
  const double es = static_cast<double>(dtype_size(src.dtype()));
  Placements cur = src.placements();
  double bytes = 0;
  for (const auto& step : steps) {
    const double n = static_cast<double>(src.mesh().size(step.mesh_dim));
    const double before =
        static_cast<double>(shape_numel(
            DTensorSpec(src.mesh(), cur, src.shape(), src.dtype()).local_shape_at(origin))) *
        es;
    cur[step.mesh_dim] = step.to;
    const double after =
        static_cast<double>(shape_numel(
            DTensorSpec(src.mesh(), cur, src.shape(), src.dtype()).local_shape_at(origin))) *
        es;
    // Every step costs at least a copy: where little crosses the wire, doing
    // nothing must still beat doing something.
    bytes += 1e-3 * after;
    using K = RedistributeStep::Kind;
    switch (step.kind) {
      case K::AllGather:
        bytes += after * (n - 1) / n;
        break;
      case K::AllReduce:
        bytes += 2 * before * (n - 1) / n;
        break;
      case K::ReduceScatter:
      case K::AllToAll:
        bytes += before * (n - 1) / n;
        break;
      case K::LocalChunk:
      case K::ToPartial:
        break;
    }
  }
  // A mesh dim of one rank changes placement without a step (the planner
  // skips it): free, but keeping the placement must still win a tie, so that
  // the propagator does not move placements for nothing.
  for (std::int64_t i = 0; i < src.mesh().ndim(); ++i)
    if (src.mesh().size(i) == 1 && src.placements()[static_cast<std::size_t>(i)] !=
                                       dst[static_cast<std::size_t>(i)].normalized(src.ndim()))
      bytes += 1e-6;
  return bytes;
}

}  // namespace dtensor
