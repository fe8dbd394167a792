// Splitting one convolution into bands of output rows along its first spatial
// dim, each run as its own convolution on the input rows it reads.
//
// Why: oneDNN runs on blocked copies of its operands. Made for the whole
// tensor, those copies are as large as the tensors themselves (a 1024^2 f32
// layer's backward held two such extra copies, ~1.5x the tensors a rank must
// hold), and each copy is written to memory and read back. Made per band, the
// copies are a few MiB that stay in cache between the reorder and the kernel.
//
// The maths is the halo plan's (docs/design.md §5) with bands for ranks: band rows
// [o0, o1) read input rows [o0*s - pl, (o1-1)*s - pl + E) clipped to the input,
// with what was clipped as the band's padding.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor::onednn {

struct RowBand {
  std::int64_t out_lo = 0, out_hi = 0;  // output rows [out_lo, out_hi)
  std::int64_t in_lo = 0, in_hi = 0;    // input rows read, [in_lo, in_hi)
  std::int64_t pad_lo = 0, pad_hi = 0;  // the band convolution's padding on this dim

  bool operator==(const RowBand&) const = default;
};

struct RowGeometry {
  std::int64_t in_len = 0, out_len = 0;
  std::int64_t kernel = 1, stride = 1, dilation = 1, pad_lo = 0, pad_hi = 0;
};

/// Bands of at most `rows_per_band` output rows, as few as that allows, their
/// heights differing by at most one. Empty when
/// banding would not be valid: fewer than two bands, or a band whose rows all
/// fall in the padding (oneDNN takes no empty input).
std::vector<RowBand> row_bands(const RowGeometry& g, std::int64_t rows_per_band);

/// Output rows per band so that a band's input and output rows take about
/// `target_bytes` together (at least 4 kernel extents, so halo rows read twice
/// stay a small fraction). `in_row_bytes` / `out_row_bytes`: bytes of one row
/// of the input / output across batch, channels and the other spatial dims.
std::int64_t rows_per_band(const RowGeometry& g, std::int64_t in_row_bytes,
                           std::int64_t out_row_bytes, std::int64_t target_bytes);

/// The parts of `t`'s tiles in rows [lo, hi) of tensor dim 2 (the first
/// spatial dim), with offsets relative to row `base` (the band's first row).
std::vector<TiledTensor::Tile> tiles_in_rows(const TiledTensor& t, std::int64_t lo, std::int64_t hi,
                                             std::int64_t base);

/// Rows [lo, hi) of `t`'s first spatial dim as one tile at offset 0.
TiledTensor::Tile rows_of(const Tensor& t, std::int64_t lo, std::int64_t hi);

/// The geometry of `p`'s first spatial dim for an input of `in_len` rows.
RowGeometry first_dim(const Shape& input, const Shape& weight, const Shape& output,
                      const ConvParams& p);
/// `p` with the band's padding on the first spatial dim.
ConvParams band_params(ConvParams p, const RowBand& b);
/// `s` with `rows` rows on the first spatial dim.
Shape with_rows(Shape s, std::int64_t rows);

/// The bands to run an f32 or bf16 convolution in (the backward passes sum
/// band gradients in f32, so bf16 results are rounded once), or none when it
/// runs whole: other dtypes, a single spatial dim (the one that is sharded),
/// banding off, or too few rows.
std::vector<RowBand> plan_bands(DType t, const Shape& input, const Shape& weight,
                                const Shape& output, const ConvParams& p);

/// One plan per band, `plan(input shape of the band, params of the band)`;
/// none when `usable(plan)` fails for some band (it cannot run in place).
template <typename MakePlan, typename Usable>
auto plans_for_bands(const std::vector<RowBand>& bands, const Shape& input, const ConvParams& p,
                     MakePlan&& plan, Usable&& usable) {
  std::vector<decltype(plan(input, p))> plans;
  for (const RowBand& b : bands) {
    plans.push_back(plan(with_rows(input, b.in_hi - b.in_lo), band_params(p, b)));
    if (!usable(*plans.back())) return decltype(plans){};
  }
  return plans;
}

/// The band budget in bytes: DTENSOR_ONEDNN_BAND_KB (0 turns banding off),
/// default 512 KiB: as fast as 1 MiB in the measurements of docs/performance.md
/// (3x3 64->64 512^2 f32 and 256^2 bf16, P = 2), and the band buffers and
/// oneDNN's per-band scratch weigh half as much next to small layers (bf16
/// 256^2, P = 2: private peak 1.38x -> 1.20x the tensors).
std::int64_t band_target_bytes();

}  // namespace dtensor::onednn
