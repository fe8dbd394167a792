// The view operators' placement rules (view_placements.h).
#include "ops/views/view_placements.h"

#include <cstddef>

#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

using Int = std::int64_t;

// Input dims [in_begin, in_end) hold the same elements, in the same order, as
// output dims [out_begin, out_end): a merge, a split or a dim kept as it is.
struct ViewGroup {
  std::size_t in_begin = 0, in_end = 0, out_begin = 0, out_end = 0;
};

// The smallest groups of equal element counts, left to right (numel > 0; a
// run of size-1 dims on one side forms a group of its own).
std::vector<ViewGroup> view_groups(const Shape& in, const Shape& out) {
  std::vector<ViewGroup> groups;
  std::size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    ViewGroup g{i, i, j, j};
    Int n_in = 1, n_out = 1;
    if (i < in.size()) n_in *= in[i++];
    if (j < out.size()) n_out *= out[j++];
    while (n_in != n_out) {
      const bool take_in = n_in < n_out;
      DTENSOR_CHECK_ARG(take_in ? i < in.size() : j < out.size(), "reshape",
                        "internal: shapes {} and {} hold different numbers of elements",
                        shape_str(in), shape_str(out));
      if (take_in)
        n_in *= in[i++];
      else
        n_out *= out[j++];
    }
    g.in_end = i;
    g.out_end = j;
    groups.push_back(g);
  }
  return groups;
}

Int product(const Shape& s, std::size_t begin, std::size_t end) {
  Int p = 1;
  for (std::size_t k = begin; k < end; ++k)
    p *= s[k];
  return p;
}

// Every coordinate of `mesh`, in row-major order.
std::vector<std::vector<Int>> coordinates(const DeviceMesh& mesh) {
  std::vector<std::vector<Int>> all{{}};
  for (Int m = 0; m < mesh.ndim(); ++m) {
    std::vector<std::vector<Int>> next;
    for (const auto& c : all)
      for (Int k = 0; k < mesh.size(m); ++k) {
        next.push_back(c);
        next.back().push_back(k);
      }
    all = std::move(next);
  }
  return all;
}

}  // namespace

ViewPlacements reshape_placements(const DTensorSpec& input, const Shape& shape) {
  const Shape& in = input.shape();
  ViewPlacements v{input.placements(), input.placements()};
  auto replicate_dim = [&](Int d) {
    for (std::size_t m = 0; m < v.input.size(); ++m)
      if (v.input[m].is_shard(d)) v.input[m] = v.output[m] = Replicate();
  };
  if (shape_numel(in) == 0) {  // nothing to keep in place: the result is empty everywhere
    for (Int d = 0; d < input.ndim(); ++d)
      replicate_dim(d);
    return v;
  }
  const auto groups = view_groups(in, shape);
  // Per input dim: its output dim when it can keep a shard (else -1), and the
  // elements one step along it (and along that output dim) stands for.
  std::vector<Int> target(in.size(), -1), in_inner(in.size(), 1), out_inner(in.size(), 1);
  for (const ViewGroup& g : groups) {
    if (g.out_begin == g.out_end) continue;
    std::size_t o = g.out_begin;
    while (o + 1 < g.out_end && shape[o] == 1)
      ++o;
    // Only the first non-singleton input dim's shard is one block of the group.
    for (std::size_t d = g.in_begin; d < g.in_end; ++d) {
      target[d] = static_cast<Int>(o);
      in_inner[d] = product(in, d + 1, g.in_end);
      out_inner[d] = product(shape, o + 1, g.out_end);
      if (in[d] != 1) break;
    }
  }
  // One sharded input dim per group: a second one (after size-1 dims) would
  // make the rank's elements of the group a strided set.
  std::vector<Int> sharded_in_group(groups.size(), -1);
  for (std::size_t m = 0; m < v.input.size(); ++m) {
    const Placement& p = v.input[m];
    if (!p.is_shard()) continue;
    const auto d = static_cast<std::size_t>(p.dim());
    std::size_t g = 0;
    while (groups[g].in_end <= d)
      ++g;
    const Int o = target[d];
    if (o < 0 || (sharded_in_group[g] >= 0 && sharded_in_group[g] != p.dim())) {
      v.input[m] = v.output[m] = Replicate();
    } else {
      sharded_in_group[g] = p.dim();
      v.output[m] = Shard(o);
    }
  }
  // Each rank's block of the kept dims must be its block of the result: the
  // chunk boundaries of a merged or split dim need not agree (uneven shards).
  const auto coords = coordinates(input.mesh());
  for (bool changed = true; changed;) {
    changed = false;
    const DTensorSpec si(input.mesh(), v.input, in, input.dtype());
    const DTensorSpec so(input.mesh(), v.output, shape, input.dtype());
    for (const auto& c : coords) {
      const Shape oi = si.global_offset_at(c), li = si.local_shape_at(c);
      const Shape oo = so.global_offset_at(c), lo = so.local_shape_at(c);
      for (std::size_t m = 0; m < v.input.size() && !changed; ++m) {
        if (!v.input[m].is_shard()) continue;
        const auto d = static_cast<std::size_t>(v.input[m].dim());
        const auto o = static_cast<std::size_t>(v.output[m].dim());
        if (oi[d] * in_inner[d] != oo[o] * out_inner[d] ||
            li[d] * in_inner[d] != lo[o] * out_inner[d]) {
          replicate_dim(static_cast<Int>(d));
          changed = true;
        }
      }
      if (changed) break;
    }
  }
  return v;
}

ViewPlacements permute_placements(const Placements& input, const std::vector<Int>& order) {
  ViewPlacements v{input, input};
  for (std::size_t m = 0; m < input.size(); ++m) {
    if (!input[m].is_shard()) continue;
    for (std::size_t k = 0; k < order.size(); ++k)
      if (order[k] == input[m].dim()) v.output[m] = Shard(static_cast<Int>(k));
  }
  return v;
}

ViewPlacements narrow_placements(const Placements& input, Int dim) {
  ViewPlacements v{input, input};
  for (std::size_t m = 0; m < input.size(); ++m)
    if (input[m].is_shard(dim)) v.input[m] = v.output[m] = Replicate();
  return v;
}

}  // namespace dtensor::detail
