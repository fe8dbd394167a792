#include "ops/window/pool_taps.h"

#include <algorithm>

#include "dtensor/core/errors.h"

namespace dtensor::window {
PoolTaps pool_taps(const WindowDim& dim, std::int64_t length, const WindowSpan& span) {
  PoolTaps t;
  const std::int64_t o_len = dim.output_length_for(length);
  for (std::int64_t o = span.output.offset; o < span.output.end(); ++o) {
    std::vector<std::int64_t> taps;
    if (dim.kind == WindowDim::Kind::Adaptive) {
      const std::int64_t lo = (o * length) / o_len;
      const std::int64_t hi = ((o + 1) * length + o_len - 1) / o_len;
      for (std::int64_t v = lo; v < hi; ++v)
        taps.push_back(v - span.origin);
      t.padded_size.push_back(hi - lo);
    } else {
      const std::int64_t start = o * dim.stride - dim.pad_left;
      for (std::int64_t j = 0; j < dim.kernel; ++j) {
        const std::int64_t v = start + j * dim.dilation;
        if (v >= 0 && v < length) taps.push_back(v - span.origin);
      }
      const std::int64_t end = std::min(start + dim.kernel, length + dim.pad_right);
      t.padded_size.push_back(end - start);
    }
    for (auto w : taps)
      check_arg(w >= 0 && w < span.length, "window",
                "internal: output {} reads window position {} outside [0, {})", o, w, span.length);
    t.taps.push_back(std::move(taps));
  }
  return t;
}

}  // namespace dtensor::window
