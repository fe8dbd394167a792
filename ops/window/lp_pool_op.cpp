// lp_pool (F.lp_pool1d/2d/3d), composed of operators that exist, as PyTorch
// composes it: avg_pool over x^p, times the kernel's size, to the power
// 1/p. Its backward is the chain rule through the same operators (the
// forward's intermediates are recomputed: avg_pool is cheap beside holding
// them). Every step is a dispatched operator, so placements, halos, dtypes
// and devices are theirs, and a bad argument fails on every rank as theirs
// do; this file adds no kernel and no communication of its own.
#include <cmath>
#include <functional>
#include <numeric>

#include "dtensor/core/errors.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/unary.h"
#include "dtensor/ops/window_ops.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "lp_pool";

// avg_pool's parameters for lp_pool's window, expanded to the input's
// spatial dims: no padding and no dilation; count_include_pad with no
// padding divides by the inputs a window covers.
PoolParams lp_pool_params(const DTensor& input, const std::vector<std::int64_t>& kernel,
                          const std::vector<std::int64_t>& stride, bool ceil_mode,
                          double norm_type) {
  DTENSOR_CHECK_ARG(std::isfinite(norm_type) && norm_type > 0, kComponent,
                    "norm_type must be a finite number > 0, not {}", norm_type);
  PoolParams p;
  p.kernel = kernel;
  p.stride = stride;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = true;
  return p.expanded(static_cast<std::int64_t>(input.shape().size()) - 2);
}

// The window sums of x^p, scaled as PyTorch's: avg_pool(x^p) times the
// number of positions in the kernel (`volume`).
DTensor window_power_sums(const DTensor& powered, const PoolParams& p, double volume) {
  return scale(avg_pool(powered, p), volume);
}

double kernel_volume(const PoolParams& p) {
  return static_cast<double>(
      std::accumulate(p.kernel.begin(), p.kernel.end(), std::int64_t{1}, std::multiplies<>()));
}

}  // namespace

DTensor lp_pool(const DTensor& input, double norm_type, const std::vector<std::int64_t>& kernel,
                const std::vector<std::int64_t>& stride, bool ceil_mode) {
  const PoolParams p = lp_pool_params(input, kernel, stride, ceil_mode, norm_type);
  return pow(window_power_sums(pow(input, norm_type), p, kernel_volume(p)), 1.0 / norm_type);
}

DTensor lp_pool_backward(const DTensor& grad_output, const DTensor& input, double norm_type,
                         const std::vector<std::int64_t>& kernel,
                         const std::vector<std::int64_t>& stride, bool ceil_mode) {
  const PoolParams p = lp_pool_params(input, kernel, stride, ceil_mode, norm_type);
  const double volume = kernel_volume(p);
  const DTensor powered = pow(input, norm_type);
  const DTensor sums = window_power_sums(powered, p, volume);
  const DTensor grad_sums = pow_backward(grad_output, sums, 1.0 / norm_type);
  const DTensor grad_powered = avg_pool_backward(scale(grad_sums, volume), powered, p);
  return pow_backward(grad_powered, input, norm_type);
}

}  // namespace dtensor
