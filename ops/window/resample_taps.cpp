#include "ops/window/resample_taps.h"

#include "dtensor/core/errors.h"

namespace dtensor::window {

kernels::ResampleTaps resample_taps(const WindowDim& dim, std::int64_t length,
                                    const WindowSpan& span, bool backward) {
  kernels::ResampleTaps t;
  t.taps = dim.kernel == 1 ? 1 : 2;
  for (std::int64_t o = span.output.offset; o < span.output.end(); ++o) {
    const auto s = dim.resample_source(length, o, backward);
    const std::int64_t i0 = s.i0 - span.origin, i1 = s.i1 - span.origin;
    check_arg(i0 >= 0 && i1 < span.length, "upsample",
              "internal: output {} reads window positions [{}, {}] outside [0, {})", o, i0, i1,
              span.length);
    t.i0.push_back(i0);
    t.i1.push_back(i1);
    t.w0.push_back(s.w0);
    t.w1.push_back(s.w1);
  }
  return t;
}

}  // namespace dtensor::window
