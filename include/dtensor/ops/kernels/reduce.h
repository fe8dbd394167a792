// The local arithmetic of the reductions over dims (dtensor/ops/reductions.h).
//
// The operators sum_dims, mean_dims, amax, amin, reduce_expand (a reduction's
// gradient spread back over the reduced dims) and reduce_tie_mask (where an
// element equals its amax / amin) have default-path kernels registered by op
// name (registry.h); var's cross-rank merge needs two slots around it:
//   reduce.moments          a block's (count, mean, M2) per result, f64
//                           (Welford's update per element, never sum(x^2));
//   reduce.var_from_moments the merged moments to the variance.
// Kernels take contiguous tensors; the reduced dims are a mask over x's dims.
#pragma once

#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// moments = (count, mean, M2) of the elements of x reduced into each result,
/// [results, 3] f64 CPU, results in x's order with the reduced dims removed.
/// An empty block gives (0, 0, 0), which Chan's merge skips.
struct ReduceMomentsArgs {
  Tensor x;
  std::vector<bool> reduced;  // one per dim of x
  Tensor moments;             // out
};

/// out[i] = M2 / max(0, count - correction) of moments[i] (torch.var's
/// divisor: NaN or inf where nothing is left), in out's dtype.
struct VarFromMomentsArgs {
  Tensor moments;  // [results, 3] f64
  double correction = 1.0;
  Tensor out;  // out, results elements, contiguous
};

inline constexpr KernelSlot<ReduceMomentsArgs> kReduceMoments{"reduce.moments"};
inline constexpr KernelSlot<VarFromMomentsArgs> kVarFromMoments{"reduce.var_from_moments"};

}  // namespace dtensor::kernels
