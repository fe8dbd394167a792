// Planning a redistribute, one mesh dim at a time (docs/design.md §4).
//
// Three phases keep nested shards right (a tensor dim sharded on several mesh
// dims is split in mesh-dim order):
//   1. last mesh dim first: shards that must change are gathered (or moved
//      straight to their new dim with an all-to-all when nothing else touches
//      either tensor dim);
//   2. pending reductions are done (all-reduce, or reduce-scatter when the
//      target shard is not nested with anything);
//   3. first mesh dim first: new shards are cut locally, new Partials made.
// A mesh dim whose shard is unchanged is still gathered and re-cut when an
// earlier mesh dim changes the same tensor dim: its chunk would otherwise be
// taken from the wrong parent.
//
// A mesh dim of one rank needs no step at all: its shard, its replica and its
// pending reduction (of one contribution) are all the whole of its parent, so
// the local data is the same under any placement there, and the other dims'
// chunks do not depend on it. (Planning steps for it copied the whole tensor:
// layer_norm on one rank spent three quarters of its time in such a copy.)
#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/placement/redistribute.h"

namespace dtensor {

std::string RedistributeStep::str() const {
  static const char* names[] = {"all-gather", "all-reduce",  "reduce-scatter",
                                "all-to-all", "local chunk", "to partial"};
  return fmt::format("mesh dim {}: {} -> {} ({})", mesh_dim, from.str(), to.str(),
                     names[static_cast<int>(kind)]);
}

std::vector<RedistributeStep> plan_redistribute(const DTensorSpec& src, const Placements& dst_in) {
  const std::int64_t nm = src.mesh().ndim();
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(dst_in.size()) == nm, "redistribute",
                    "placements: {} given ({}) for a {}-D mesh", dst_in.size(),
                    placements_str(dst_in), nm);
  Placements dst;
  for (auto& p : dst_in) {
    if (p.is_shard())
      DTENSOR_CHECK_ARG(p.dim() >= -src.ndim() && p.dim() < src.ndim(), "redistribute",
                        "placements: {} is out of range for a tensor of rank {}", p.str(),
                        src.ndim());
    dst.push_back(p.normalized(src.ndim()));
  }
  const Placements& from = src.placements();
  for (std::int64_t i = 0; i < nm; ++i)
    DTENSOR_CHECK_ARG(!(from[i].is_shard() && dst[i].is_partial()), "redistribute",
                      "placements: mesh dim {}: {} -> {} is not supported (a shard cannot become a "
                      "pending reduction; reduce or replicate it first)",
                      i, from[i].str(), dst[i].str());

  // trivial[i]: mesh dim i has one rank, and any change there is free.
  std::vector<bool> trivial(nm);
  for (std::int64_t i = 0; i < nm; ++i)
    trivial[i] = src.mesh().size(i) == 1;
  // keep[i]: mesh dim i needs no step (it ends as it started, or is trivial).
  std::vector<bool> keep(nm);
  for (std::int64_t i = 0; i < nm; ++i)
    keep[i] = from[i] == dst[i] || trivial[i];
  for (bool changed = true; changed;) {
    changed = false;
    for (std::int64_t j = 0; j < nm; ++j) {
      if (!keep[j] || trivial[j] || !from[j].is_shard()) continue;
      const auto d = from[j].dim();
      for (std::int64_t i = 0; i < j; ++i)
        if (!keep[i] && (from[i].is_shard(d) || dst[i].is_shard(d))) {
          keep[j] = false;
          changed = true;
          break;
        }
    }
  }
  // Is tensor dim d sharded (now or at the end) by any mesh dim other than `except`?
  auto touched_elsewhere = [&](const Placements& cur, std::int64_t d, std::int64_t except) {
    for (std::int64_t k = 0; k < nm; ++k)
      if (k != except && !trivial[k] && (cur[k].is_shard(d) || dst[k].is_shard(d))) return true;
    return false;
  };

  std::vector<RedistributeStep> steps;
  Placements cur = from;
  for (std::int64_t i = 0; i < nm; ++i)
    if (trivial[i]) cur[i] = dst[i];
  using K = RedistributeStep::Kind;
  for (std::int64_t i = nm; i-- > 0;) {  // phase 1
    if (keep[i] || !cur[i].is_shard()) continue;
    const auto d = cur[i].dim();
    if (dst[i].is_shard() && !touched_elsewhere(cur, d, i) &&
        !touched_elsewhere(cur, dst[i].dim(), i)) {
      steps.push_back({K::AllToAll, i, cur[i], dst[i]});
      cur[i] = dst[i];
    } else {
      steps.push_back({K::AllGather, i, cur[i], Replicate()});
      cur[i] = Replicate();
    }
  }
  for (std::int64_t i = 0; i < nm; ++i) {  // phase 2
    if (!cur[i].is_partial() || cur[i] == dst[i]) continue;
    if (dst[i].is_shard() && !touched_elsewhere(cur, dst[i].dim(), i)) {
      steps.push_back({K::ReduceScatter, i, cur[i], dst[i]});
      cur[i] = dst[i];
    } else {
      steps.push_back({K::AllReduce, i, cur[i], Replicate()});
      cur[i] = Replicate();
    }
  }
  for (std::int64_t i = 0; i < nm; ++i) {  // phase 3
    if (cur[i] == dst[i]) continue;
    if (dst[i].is_shard())
      steps.push_back({K::LocalChunk, i, cur[i], dst[i]});
    else if (dst[i].is_partial())
      steps.push_back({K::ToPartial, i, cur[i], dst[i]});
    cur[i] = dst[i];
  }
  return steps;
}

}  // namespace dtensor
