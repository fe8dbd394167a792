#include "backends/eigen/im2col.h"

#include <algorithm>

namespace dtensor::eigen_backend {

ConvGeometry ConvGeometry::make(const Shape& input, const Shape& weight, const ConvParams& p) {
  ConvGeometry g;
  const std::size_t nsp = input.size() - 2, first = 3 - nsp;
  g.batch = input[0];
  g.channels = input[1];
  g.out_channels = weight[0];
  g.groups = p.groups;
  g.group_channels = g.channels / g.groups;
  g.group_out_channels = g.out_channels / g.groups;
  for (std::size_t i = 0; i < nsp; ++i) {
    const std::size_t t = first + i;
    g.in[t] = input[2 + i];
    g.kernel[t] = weight[2 + i];
    g.stride[t] = p.stride[i];
    g.dilation[t] = p.dilation[i];
    g.pad_left[t] = p.padding[i].first;
    g.out[t] = conv_output_length(g.in[t], g.kernel[t], g.stride[t], g.dilation[t],
                                  p.padding[i].first, p.padding[i].second);
  }
  return g;
}

namespace {

// Walks the tile's column matrix one segment (row, o0, o1) of n = O2 entries at
// a time: f(j, in0, s2, lo, hi, n) with j the segment's offset in the matrix;
// entries o in [lo, hi) read x[in0 + o*s2], the others read padding. Computing
// [lo, hi) once per segment keeps the padding test out of the innermost loop.
template <typename F>
void for_each_segment(const ConvGeometry& g, const OutputTile& tile, F&& f) {
  const auto& I = g.in;
  const auto& O = g.out;
  const std::int64_t cols = tile.columns(g);
  const std::int64_t s2 = g.stride[2];
  std::int64_t row = 0;
  for (std::int64_t c = 0; c < g.group_channels; ++c)
    for (std::int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
      for (std::int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
        for (std::int64_t k2 = 0; k2 < g.kernel[2]; ++k2, ++row) {
          // Outputs o2 in [lo, hi) read inside the input along the last dim.
          const std::int64_t shift = k2 * g.dilation[2] - g.pad_left[2];
          const std::int64_t lo = std::min(shift >= 0 ? 0 : (-shift + s2 - 1) / s2, O[2]);
          const std::int64_t hi =
              std::clamp(I[2] - shift <= 0 ? 0 : (I[2] - shift + s2 - 1) / s2, lo, O[2]);
          std::int64_t j = row * cols;
          for (std::int64_t seg = tile.begin; seg < tile.end; ++seg, j += O[2]) {
            const std::int64_t o0 = seg / O[1], o1 = seg % O[1];
            const std::int64_t i0 = o0 * g.stride[0] - g.pad_left[0] + k0 * g.dilation[0];
            const std::int64_t i1 = o1 * g.stride[1] - g.pad_left[1] + k1 * g.dilation[1];
            if (i0 < 0 || i0 >= I[0] || i1 < 0 || i1 >= I[1]) {
              f(j, 0, s2, O[2], O[2], O[2]);  // the whole segment reads padding
              continue;
            }
            f(j, ((c * I[0] + i0) * I[1] + i1) * I[2] + shift, s2, lo, hi, O[2]);
          }
        }
}

}  // namespace

void im2col(const ConvGeometry& g, const OutputTile& tile, const double* x, double* col) {
  for_each_segment(g, tile,
                   [&](std::int64_t j, std::int64_t in0, std::int64_t s2, std::int64_t lo,
                       std::int64_t hi, std::int64_t n) {
                     double* dst = col + j;
                     std::fill(dst, dst + lo, 0.0);
                     for (std::int64_t o = lo; o < hi; ++o)
                       dst[o] = x[in0 + o * s2];
                     std::fill(dst + hi, dst + n, 0.0);
                   });
}

void col2im_add(const ConvGeometry& g, const OutputTile& tile, const double* col, double* x) {
  for_each_segment(g, tile,
                   [&](std::int64_t j, std::int64_t in0, std::int64_t s2, std::int64_t lo,
                       std::int64_t hi, std::int64_t) {
                     const double* src = col + j;
                     for (std::int64_t o = lo; o < hi; ++o)
                       x[in0 + o * s2] += src[o];
                   });
}

}  // namespace dtensor::eigen_backend
