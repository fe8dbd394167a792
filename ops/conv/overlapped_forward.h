// The forward pass with the last sharded dim's halo exchange overlapped with
// compute (issue 6, item 8): post the exchange, compute the outputs that read
// only this rank's own input (the interior), wait, then compute the boundary
// outputs on either side, each into its part of one output tensor.
//
// Opt-in (DTENSOR_CONV_OVERLAP=1), because here it does not pay: on this
// 2-core VM the exchange of a 3x3 64-channel 256^2 layer at P = 2 waited
// 0.4-3.9 ms in the plain forward and ~0.005 ms once overlapped, but the two
// boundary columns, computed as two more kernel calls on 1-column outputs,
// took 0.8-1.0 ms against 11.5 ms for the interior, and the medians did not
// improve (docs/performance.md). Where halos are slow to arrive (a real
// network, thin shards with several hops) it should.
#pragma once

#include <functional>
#include <optional>

#include "dtensor/core/process_group.h"
#include "dtensor/ops/local_conv.h"
#include "ops/conv/halo_plan.h"

namespace dtensor::conv {

/// Outputs [lo, hi) along the exchanged dim that read only the own part.
struct InteriorOutputs {
  std::int64_t lo = 0, hi = 0;
};

/// Where to split, or nullopt when overlapping does not apply (nothing to
/// receive, a boundary range that reads only padding) or, unless `force`,
/// would not pay (the interior under 4/5 of the outputs, or a window of fewer
/// than 2^18 elements). `params` are the local ones (the window's padding);
/// `sd` the spatial dim; `out_len` the local output extent along it.
std::optional<InteriorOutputs> interior_outputs(const HaloRankPlan& me, const Shape& weight_shape,
                                                const ConvParams& params, std::int64_t sd,
                                                std::int64_t out_len, std::int64_t window_elements,
                                                bool force);

/// DTENSOR_CONV_OVERLAP: unset or "0" never overlaps (the default), "1"
/// overlaps where the gate above says it may pay, "always" wherever it
/// applies (tests).
enum class OverlapMode { Never, Always, Auto };
OverlapMode overlap_mode();

/// The forward of `local` (already gathered along earlier dims) over the
/// window of `me` along tensor dim `dim`, split at `interior`. The exchange
/// goes with `tag`; `before_wait` runs between the interior and the wait
/// (the handler confirms its agreement check there, behind the interior).
Tensor overlapped_forward(const LocalConvKernels& kernels, const Tensor& local, std::int64_t dim,
                          const HaloRankPlan& me, ProcessGroup& group, const Tensor& w,
                          const Tensor& b, const ConvParams& params, const Shape& out_shape,
                          const InteriorOutputs& interior, int tag,
                          const std::function<void()>& before_wait);

}  // namespace dtensor::conv
