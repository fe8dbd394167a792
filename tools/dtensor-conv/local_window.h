// The local convolution one rank runs inside the distributed one: the input
// window it convolves (its shard extended by the halo, clipped to the tensor)
// and the local padding at the window's edges (docs/design.md §5, ops/window/halo_plan.h).
// --bench times the local kernel alone on exactly this problem, so that the
// ratio distributed / local is the cost of distribution.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/shape.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/placement/placement.h"

namespace dtensor::conv_cli {

struct LocalWindow {
  Shape input;        // [N_local, C, window extents...]
  ConvParams params;  // expanded; padding replaced by the local (lp, rp) on sharded dims
  /// False when this rank owns no output (it only sends halos): nothing to time.
  bool computes = true;
};

/// The window of the rank at mesh `coordinate`. `params` must be expanded.
/// Shard(0) (batch) shrinks N; a spatial Shard(d) takes the halo plan's window
/// of the global extent (a dim sharded on several mesh dims uses the first
/// one only: an approximation); Shard(1), Replicate and Partial keep the
/// global extent.
LocalWindow local_window(const Shape& input, const Shape& weight, const ConvParams& params,
                         const Shape& mesh, const Placements& placements,
                         const std::vector<std::int64_t>& coordinate);

}  // namespace dtensor::conv_cli
