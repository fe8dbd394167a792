// How far a distributed result may be from the f64 oracle, per dtype.
//
// Results are sums of `terms` products of values in [-1, 1) (the seeded data),
// computed in the run's dtype, plus the reduction of Partial results over at
// most `ranks` contributions. The oracle sees the very same (rounded) inputs, so
// the only differences are accumulation and storage rounding:
//   f64:  1e-10 relative to max(1, max|ref|) (tight: no statistical allowance);
//   f32:  u32 * (8 sqrt(terms + 1) + 2 ranks) * max(1, max|ref|): rounding errors
//         of long sums grow like sqrt(terms) in practice (oneDNN sums in blocks),
//         with a factor 8 of headroom; a wrong halo gives errors of order 1;
//   bf16: the f32 bound (oneDNN accumulates bf16 in f32) plus 2 u_bf16 per
//         bf16 rounding of the result and of each Partial contribution;
//   f16:  the same with u_f16 = 2^-11 (the CPU and cuDNN both accumulate f16
//         in f32).
// The same formula is in tools/check_dump.py; keep them in step.
#pragma once

#include <cstdint>

#include "dtensor/core/dtype.h"

namespace dtensor::cli {

double tolerance(DType t, std::int64_t terms, int ranks, double ref_max);

}  // namespace dtensor::cli
