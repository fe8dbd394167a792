#include "backends/onednn/row_bands.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace dtensor::onednn {

std::vector<RowBand> row_bands(const RowGeometry& g, std::int64_t rows_per_band) {
  std::vector<RowBand> bands;
  if (rows_per_band <= 0 || g.out_len <= rows_per_band) return bands;
  const std::int64_t extent = g.dilation * (g.kernel - 1) + 1;
  for (std::int64_t o0 = 0; o0 < g.out_len; o0 += rows_per_band) {
    RowBand b;
    b.out_lo = o0;
    b.out_hi = std::min(g.out_len, o0 + rows_per_band);
    const std::int64_t first = b.out_lo * g.stride - g.pad_lo;                // may be < 0
    const std::int64_t last = (b.out_hi - 1) * g.stride - g.pad_lo + extent;  // exclusive
    b.in_lo = std::max<std::int64_t>(first, 0);
    b.in_hi = std::min(last, g.in_len);
    if (b.in_hi <= b.in_lo) return {};  // a band wholly in the padding
    b.pad_lo = b.in_lo - first;
    b.pad_hi = last - b.in_hi;
    bands.push_back(b);
  }
  return bands;
}

std::int64_t rows_per_band(const RowGeometry& g, std::int64_t in_row_bytes,
                           std::int64_t out_row_bytes, std::int64_t target_bytes) {
  const std::int64_t extent = g.dilation * (g.kernel - 1) + 1;
  // One output row costs `stride` input rows and one output row.
  const std::int64_t per_row = std::max<std::int64_t>(1, g.stride * in_row_bytes + out_row_bytes);
  return std::max<std::int64_t>(target_bytes / per_row, 4 * extent);
}

std::vector<TiledTensor::Tile> tiles_in_rows(const TiledTensor& t, std::int64_t lo, std::int64_t hi,
                                             std::int64_t base) {
  std::vector<TiledTensor::Tile> out;
  for (const auto& tile : t.tiles()) {
    const std::int64_t t_lo = tile.offset[2], t_hi = t_lo + tile.data.size(2);
    const std::int64_t a = std::max(lo, t_lo), b = std::min(hi, t_hi);
    if (b <= a) continue;
    Shape off = tile.offset;
    off[2] = a - base;
    out.push_back({tile.data.narrow(2, a - t_lo, b - a), off});
  }
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
  if (t != DType::F32 || input.size() < 4 || target <= 0) return {};
  const RowGeometry g = first_dim(input, weight, output, p);
  const std::int64_t elem = 4;
  const std::int64_t in_row = shape_numel(input) / input[2] * elem;
  const std::int64_t out_row = shape_numel(output) / output[2] * elem;
  return row_bands(g, rows_per_band(g, in_row, out_row, target));
}

std::int64_t band_target_bytes() {
  // Read on every call (cheap next to a convolution), so a test can change it.
  const char* v = std::getenv("DTENSOR_ONEDNN_BAND_KB");
  return (v && *v ? std::strtoll(v, nullptr, 10) : 1024) * 1024;
}

}  // namespace dtensor::onednn
