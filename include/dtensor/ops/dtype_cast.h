// Converting a DTensor to another floating dtype, as torch's x.to(dtype).
#pragma once

#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// `input` in `dtype`: `input` itself when it already has it (as torch
/// returns self), else a converted copy with the same placements (Partial
/// stays Partial: each pending term is converted). Differentiable: the
/// gradient is converted back to the input's dtype, so an f32 parameter used
/// in bf16 gets an f32 gradient.
DTensor to(const DTensor& input, DType dtype);

}  // namespace dtensor
