#include "tools/cli/tolerance.h"

#include <algorithm>
#include <cmath>

namespace dtensor::cli {

double tolerance(DType t, std::int64_t terms, int ranks, double ref_max) {
  const double scale = std::max(1.0, ref_max);
  if (t == DType::F64) return 1e-10 * scale;
  const double u32 = std::ldexp(1.0, -24);
  const double n = static_cast<double>(std::max<std::int64_t>(terms, 0));
  const double p = static_cast<double>(std::max(ranks, 1));
  double tol = u32 * (8.0 * std::sqrt(n + 1.0) + 2.0 * p) * scale;
  if (t == DType::BF16) tol += std::ldexp(1.0, -8) * 2.0 * (p + 2.0) * scale;
  if (t == DType::F16) tol += std::ldexp(1.0, -11) * 2.0 * (p + 2.0) * scale;
  return tol;
}

}  // namespace dtensor::cli
