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

/// A step begun before the ranks' agreement on it is confirmed: a small
/// all-reduce (Partial -> Replicate) whose messages are posted under a tag of
/// the call's own (agreed_call_tag), so that the agreement check travels with
/// them. finish() (after the check is confirmed) waits and returns the step's
/// result, as apply_redistribute_step would.
class StartedReduction {
 public:
  StartedReduction(Tensor out, ProcessGroup& group, ReduceOp op, int tag)
      : out_(std::move(out)), messages_(group, out_, op, tag) {}
  Tensor finish() {
    messages_.finish();
    return out_;
  }

 private:
  Tensor out_;
  DirectAllreduce messages_;
};

/// Begins `step` that way when it can be (an all-reduce that fits a
/// DirectAllreduce); nullopt otherwise (the caller confirms, then applies it).
std::optional<StartedReduction> start_reduction(const Tensor& local, const DTensorSpec& from,
                                                const RedistributeStep& step, int tag);

}  // namespace dtensor
