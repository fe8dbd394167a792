// The redistribute planner: from a spec and target placements, the sequence
// of one-mesh-dim transitions that gets there, each moving as little as
// possible and never gathering a nested shard more than needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/direct_allreduce.h"
#include "dtensor/core/tensor.h"
#include "dtensor/placement/dtensor_spec.h"
#include "dtensor/placement/rank_agreement.h"

namespace dtensor {

struct RedistributeStep {
  enum class Kind {
    AllGather,      // S(d) -> R
    AllReduce,      // P -> R
    ReduceScatter,  // P -> S(d)
    AllToAll,       // S(d) -> S(d')
    LocalChunk,     // R -> S(d)
    ToPartial,      // R -> P
  };
  Kind kind{};
  std::int64_t mesh_dim{};
  Placement from;
  Placement to;
  std::string str() const;  // "mesh dim 1: S(2) -> R (all-gather)"
};

/// Plans src -> dst. InvalidArgument for S -> P, or placements that don't fit.
std::vector<RedistributeStep> plan_redistribute(const DTensorSpec& src, const Placements& dst);

/// Runs one step on this rank's local tensor: `from` is the spec before the
/// step, `to` the spec after it. Collective over mesh dim `step.mesh_dim`.
Tensor apply_redistribute_step(const Tensor& local, const DTensorSpec& from, const DTensorSpec& to,
                               const RedistributeStep& step);

/// Begins `step` before the ranks' agreement on it is confirmed, where that
/// is safe: a small all-reduce (Partial -> Replicate), as a DirectAllreduce
/// of a copy of `local` under a tag of the call's own (agreed_call_tag), so
/// that the agreement check travels with its messages; finish() (after the
/// check is confirmed) returns what apply_redistribute_step would. nullopt
/// for any other step (the caller confirms, then applies it).
std::optional<DirectAllreduce> start_reduction(const Tensor& local, const DTensorSpec& from,
                                               const RedistributeStep& step, int tag);

}  // namespace dtensor
