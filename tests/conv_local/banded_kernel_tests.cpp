// oneDNN runs large f32 and bf16 convolutions in bands of output rows (backends/onednn/
// row_bands.h). The band maths is checked on its own, and the banded passes
// against the naive f64 reference with a small band budget
// (DTENSOR_ONEDNN_BAND_KB) so that small tensors split into many bands:
// strides, dilations, asymmetric and wide padding, stride gaps between band
// windows, tiled windows split across bands, grouped and depthwise weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "backends/onednn/row_bands.h"
#include "dtensor/ops/local_conv.h"
#include "tests/conv_local/kernel_tolerance.h"
#include "tests/support/scoped_config.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using dtensor::onednn::row_bands;
using dtensor::onednn::RowBand;
using dtensor::onednn::RowGeometry;
using dtensor::testing::kernel_tolerance;
using dtensor::testing::unit_roundoff;

namespace {

std::int64_t out_len(const RowGeometry& g) {
  return (g.in_len + g.pad_lo + g.pad_hi - g.dilation * (g.kernel - 1) - 1) / g.stride + 1;
}

// Sets the band budget for the scope of one test.
struct BandBudget : dtensor::testing::ScopedConfig {
  explicit BandBudget(const char* kb)
      : ScopedConfig([kb](dtensor::Config& c) { c.onednn_band_kb = std::stoll(kb); }) {}
};

}  // namespace

TEST_CASE(
    "row bands: bands tile the output rows, read the rows their outputs need and pad "
    "exactly what falls outside",
    "[bands]") {
  for (std::int64_t k = 1; k <= 4; ++k)
    for (std::int64_t s = 1; s <= 3; ++s)
      for (std::int64_t d = 1; d <= 2; ++d)
        for (std::int64_t pl = 0; pl <= 3; ++pl)
          for (std::int64_t pr = 0; pr <= 2; ++pr)
            for (std::int64_t len = 1; len <= 30; len += 7)
              for (std::int64_t rows = 1; rows <= 5; ++rows) {
                RowGeometry g{len, 0, k, s, d, pl, pr};
                if (len + pl + pr < d * (k - 1) + 1) continue;
                g.out_len = out_len(g);
                const auto bands = row_bands(g, rows);
                INFO("len " << len << " k " << k << " s " << s << " d " << d << " pad " << pl << ","
                            << pr << " rows " << rows);
                if (bands.empty()) continue;  // one band, or a band wholly in padding
                std::int64_t next = 0;
                // As few bands as `rows` allows, of heights differing by at most one.
                CHECK(static_cast<std::int64_t>(bands.size()) == (g.out_len + rows - 1) / rows);
                for (const RowBand& b : bands) {
                  CHECK(b.out_hi - b.out_lo <= rows);
                  CHECK(b.out_hi - b.out_lo >= g.out_len / static_cast<std::int64_t>(bands.size()));
                  CHECK(b.out_lo == next);
                  next = b.out_hi;
                  // The band's own convolution yields exactly its output rows...
                  RowGeometry bg{b.in_hi - b.in_lo, 0, k, s, d, b.pad_lo, b.pad_hi};
                  CHECK(out_len(bg) == b.out_hi - b.out_lo);
                  // ...and reads what the whole convolution's rows read: output
                  // row o starts at input o*s - pl, here at (o - out_lo)*s - pad_lo.
                  CHECK(b.in_lo - b.pad_lo == b.out_lo * s - pl);
                  CHECK(b.in_lo >= 0);
                  CHECK(b.in_hi <= len);
                  CHECK(b.pad_lo >= 0);
                  CHECK(b.pad_hi >= 0);
                }
                CHECK(next == g.out_len);
              }
  // A band whose rows all read padding: no banding.
  CHECK(row_bands(RowGeometry{2, 8, 1, 1, 1, 3, 3}, 2).empty());
}

namespace {

struct BandCase {
  Shape in, w;
  ConvParams p;
};

// Rounding of one result: f32 accumulates `terms` products
// (kernel_tolerance.h); a bf16 result is rounded once more, and only once:
// the bands sum in f32.
double result_tolerance(DType dt, std::int64_t terms, double ref_max) {
  const double f32 = kernel_tolerance(DType::F32, terms, ref_max);
  return dt == DType::BF16 ? f32 + unit_roundoff(DType::BF16) * std::max(1.0, ref_max) : f32;
}

void check_banded(const BandCase& c, DType dt);

}  // namespace

TEST_CASE(
    "banded oneDNN passes match the reference: strides, dilations, padding, stride gaps, "
    "groups, few channels, tiles across bands, f32 and bf16",
    "[bands][kernels]") {
  const BandBudget budget("8");  // a few rows per band
  const std::vector<BandCase> cases = {
      {{1, 16, 40, 12}, {16, 16, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}},
      {{2, 16, 37, 9}, {32, 16, 3, 2}, ConvParams{{2, 1}, {{2, 0}, {1, 1}}, {2, 1}, 1}},
      {{1, 16, 45, 8}, {16, 16, 2, 3}, ConvParams{{5, 1}, {{0, 0}, {1, 1}}, {1}, 1}},  // gaps
      {{1, 32, 33, 10}, {32, 1, 3, 3}, ConvParams{{1}, {{3, 1}, {1, 1}}, {2, 1}, 32}},
      {{1, 32, 30, 9}, {64, 16, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 2}},
      {{1, 16, 20, 9, 7}, {16, 16, 3, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}},
      // Few channels: a plain input layout (the bands copy their rows) and a
      // channel-padded input gradient (read out of the bands' padded buffer).
      {{1, 3, 41, 12}, {16, 3, 7, 7}, ConvParams{{2}, {{3, 3}}, {1}, 1}},
      {{2, 5, 30, 9}, {8, 5, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}},
  };
  for (DType dt : {DType::F32, DType::BF16})
    for (const auto& c : cases) {
      INFO(dtype_name(dt) << " input " << shape_str(c.in) << " weight " << shape_str(c.w) << " "
                          << c.p.str());
      check_banded(c, dt);
    }
}

namespace {

void check_banded(const BandCase& c, DType dt) {
  const auto k = local_conv_kernels(Device::cpu(), dt);
  const Tensor x = Tensor::rand(c.in, dt, 1);
  const Tensor w = Tensor::rand(c.w, dt, 2);
  const Tensor b = Tensor::rand({c.w[0]}, dt, 3);
  const Shape os = conv_output_shape(c.in, c.w, c.p);
  const Tensor gy = Tensor::rand(os, dt, 4);
  std::int64_t ks = 1;
  for (std::size_t i = 2; i < c.w.size(); ++i)
    ks *= c.w[i];
  const std::int64_t pixels = shape_numel(os) / os[1];

  // The window in three tiles along the last dim and two along the band dim.
  TiledTensor tiles(c.in, dt, Device::cpu());
  const std::int64_t h = c.in[2], wlast = c.in.back(), hm = h / 2 + 1, wm = wlast / 3;
  const std::int64_t last = static_cast<std::int64_t>(c.in.size()) - 1;
  for (auto [h0, h1] : {std::pair<std::int64_t, std::int64_t>{0, hm}, {hm, h}})
    for (auto [w0, w1] :
         {std::pair<std::int64_t, std::int64_t>{0, wm}, {wm, wm + 1}, {wm + 1, wlast}}) {
      Shape off(c.in.size(), 0);
      off[2] = h0;
      off[static_cast<std::size_t>(last)] = w0;
      tiles.add(x.narrow(2, h0, h1 - h0).narrow(last, w0, w1 - w0), off);
    }

  const Tensor y_ref = reference::ref_conv_forward(x, w, b, c.p);
  CHECK(max_abs_diff(k->forward(x, w, b, c.p), y_ref) <=
        result_tolerance(dt, c.w[1] * ks, max_abs(y_ref)));
  CHECK(max_abs_diff(k->forward(tiles, w, b, c.p), y_ref) <=
        result_tolerance(dt, c.w[1] * ks, max_abs(y_ref)));

  const Tensor gx_ref = reference::ref_conv_grad_input(gy, w, c.in, c.p);
  const double gx_tol = result_tolerance(dt, c.w[0] / c.p.groups * ks, max_abs(gx_ref));
  CHECK(max_abs_diff(k->backward_data(gy, w, c.in, c.p), gx_ref) <= gx_tol);
  // Into tiles that start out as garbage: every position must be written.
  TiledTensor gtiles(c.in, dt, Device::cpu());
  const Tensor gbuf = Tensor::full(c.in, 9.0, dt);
  for (const auto& t : tiles.tiles()) {
    Tensor view = gbuf;
    for (std::size_t d = 0; d < c.in.size(); ++d)
      view = view.narrow(static_cast<std::int64_t>(d), t.offset[d], t.data.shape()[d]);
    gtiles.add(view, t.offset);
  }
  k->backward_data(gy, w, gtiles, c.p);
  CHECK(max_abs_diff(gbuf, gx_ref) <= gx_tol);

  const Tensor gw_ref = reference::ref_conv_grad_weight(gy, x, c.w, c.p);
  const Tensor gb_ref = reference::ref_conv_grad_bias(gy);
  const ConvWeightGrads g = k->backward_weights(gy, tiles, c.w, c.p, true);
  CHECK(max_abs_diff(g.grad_weight, gw_ref) <=
        result_tolerance(dt, c.in[0] * pixels, max_abs(gw_ref)));
  CHECK(max_abs_diff(g.grad_bias, gb_ref) <=
        result_tolerance(dt, c.in[0] * pixels, max_abs(gb_ref)));
}

}  // namespace
