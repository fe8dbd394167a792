// The sum of a row of contiguous values, the reduction several CPU kernels
// end in (per-channel sums, a sample's per-position losses): in the values'
// own type over blocks that stay accurate, in f64 across the blocks.
#pragma once

#include <cstdint>

namespace dtensor::cpu {

double row_sum(const float* x, std::int64_t n);
double row_sum(const double* x, std::int64_t n);

}  // namespace dtensor::cpu
