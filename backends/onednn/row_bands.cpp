#include "backends/onednn/row_bands.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "dtensor/core/config.h"

namespace dtensor::onednn {

std::vector<RowBand> row_bands(const RowGeometry& g, std::int64_t rows_per_band) {
  std::vector<RowBand> bands;
  if (rows_per_band <= 0 || g.out_len <= rows_per_band) return bands;
  // As many bands as the budget needs, their heights differing by at most one:
  // a halo window's one or two rows over a multiple of the budget would
  // otherwise run as a band of their own (a whole primitive execution, its
  // reorders and its weights' pass, for two rows).
  const std::int64_t count = (g.out_len + rows_per_band - 1) / rows_per_band;
  const std::int64_t base = g.out_len / count, taller = g.out_len % count;
  for (std::int64_t k = 0, o0 = 0; k < count; ++k) {
    RowBand b;
    b.out_lo = o0;
    b.out_hi = o0 + base + (k < taller ? 1 : 0);
    o0 = b.out_hi;
    const ConvInputRange r =
        conv_input_range(g.in_len, g.kernel, g.stride, g.dilation, g.pad_lo, b.out_lo, b.out_hi);
    if (r.hi <= r.lo) return {};  // a band wholly in the padding
    b.in_lo = r.lo;
    b.in_hi = r.hi;
    b.pad_lo = r.pad_lo;
    b.pad_hi = r.pad_hi;
    bands.push_back(b);
  }
  return bands;
}

std::int64_t rows_per_band(const RowGeometry& g, std::int64_t in_row_bytes,
                           std::int64_t out_row_bytes, std::int64_t target_bytes) {
  const std::int64_t extent = conv_kernel_extent(g.kernel, g.dilation);
  // One output row costs `stride` input rows and one output row.
  const std::int64_t per_row = std::max<std::int64_t>(1, g.stride * in_row_bytes + out_row_bytes);
  return std::max<std::int64_t>(target_bytes / per_row, 4 * extent);
}

std::vector<TiledTensor::Tile> tiles_in_rows(const TiledTensor& t, std::int64_t lo, std::int64_t hi,
                                             std::int64_t base) {
  if (hi <= lo) return {};
  std::vector<TiledTensor::Tile> out = t.narrow(2, lo, hi - lo).tiles();
  for (auto& tile : out)
    tile.offset[2] += lo - base;
  return out;
}

TiledTensor::Tile rows_of(const Tensor& t, std::int64_t lo, std::int64_t hi) {
  return {t.narrow(2, lo, hi - lo), Shape(t.shape().size(), 0)};
}

RowGeometry first_dim(const Shape& input, const Shape& weight, const Shape& output,
                      const ConvParams& p) {
  return {input[2],      output[2],          weight[2],          p.stride[0],
          p.dilation[0], p.padding[0].first, p.padding[0].second};
}

ConvParams band_params(ConvParams p, const RowBand& b) {
  p.padding[0] = {b.pad_lo, b.pad_hi};
  return p;
}

Shape with_rows(Shape s, std::int64_t rows) {
  s[2] = rows;
  return s;
}

std::vector<RowBand> plan_bands(DType t, const Shape& input, const Shape& weight,
                                const Shape& output, const ConvParams& p) {
  const std::int64_t target = band_target_bytes();
  if ((t != DType::F32 && t != DType::BF16) || input.size() < 4 || target <= 0) return {};
  const RowGeometry g = first_dim(input, weight, output, p);
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(t));
  const std::int64_t in_row = shape_numel(input) / input[2] * elem;
  const std::int64_t out_row = shape_numel(output) / output[2] * elem;
  return row_bands(g, rows_per_band(g, in_row, out_row, target));
}

std::int64_t band_target_bytes() {
  // Read on every call (cheap next to a convolution), so set_config applies at once.
  return config().onednn_band_kb * 1024;
}

}  // namespace dtensor::onednn
