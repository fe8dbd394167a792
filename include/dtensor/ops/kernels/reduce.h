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
#include "dtensor/ops/registry.h"

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

// ---- what every backend's reduction kernels decode from their call ----

/// One flag per dim of an `ndim`-dim tensor: whether `dims` reduces it.
inline std::vector<bool> reduced_mask(const IntList& dims, std::size_t ndim) {
  std::vector<bool> mask(ndim, false);
  for (const std::int64_t d : dims)
    mask.at(static_cast<std::size_t>(d)) = true;
  return mask;
}

/// mean_dims' divisor: the global element count over the reduced dims (so a
/// sharded input's partial results add up to the mean).
inline double reduced_count(const KernelCall& c) {
  const Shape& global = c.input_specs.at(0).shape();
  double n = 1;
  for (const std::int64_t d : c.schema.int_list(1))
    n *= static_cast<double>(global.at(static_cast<std::size_t>(d)));
  return n;
}

/// sum_to_size's local target: a kept dim has the gradient's local extent
/// (sharded alike), a summed one 1; `reduced` flags the gradient's dims that
/// are summed (the leading ones the target lacks, and those where it has 1).
struct SumToSizeTarget {
  Shape local;
  std::vector<bool> reduced;
};
inline SumToSizeTarget sum_to_size_target(const KernelCall& c) {
  const Shape& g = c.local(0).shape();
  const Shape& global = c.input_specs.at(0).shape();
  const IntList& target = c.schema.int_list(1);
  const std::size_t off = global.size() - target.size();
  SumToSizeTarget t{Shape(target.size()), std::vector<bool>(g.size(), true)};
  for (std::size_t k = 0; k < target.size(); ++k) {
    const bool kept = target[k] == global[off + k];
    t.local[k] = kept ? g[off + k] : 1;
    t.reduced[off + k] = !kept;
  }
  return t;
}
inline constexpr KernelSlot<VarFromMomentsArgs> kVarFromMoments{"reduce.var_from_moments"};

}  // namespace dtensor::kernels
