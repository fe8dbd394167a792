// The tiled entry points of the local kernels (a halo window held as the
// shard plus received strips) against the naive f64 reference, for every
// registered CPU backend: tiles along the sharded (last) or first spatial dim,
// tiles that are strided views of larger tensors, channel counts that give
// oneDNN blocked layouts (tiles reordered in place) and ones that do not (the
// assembled fallback). backward_data must write every tile and nothing else.
#include <catch2/catch.hpp>

#include <cmath>

#include "dtensor/core/errors.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/ops/tiled_tensor.h"
#include "tests/conv_local/kernel_tolerance.h"
#include "tests/support/scoped_config.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using dtensor::reference::ref_conv_forward;
using dtensor::reference::ref_conv_grad_bias;
using dtensor::reference::ref_conv_grad_input;
using dtensor::reference::ref_conv_grad_weight;
using dtensor::testing::kernel_tolerance;

namespace {

std::int64_t prod_from(const Shape& s, std::size_t from) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < s.size(); ++i)
    n *= s[i];
  return n;
}

// Splits [0, len) along `dim` at `cuts`. With `views`, each piece is a strided
// view into a wider buffer (as the own part of a window is a view of the
// shard); the buffer is returned too so callers can check what lies around.
struct Pieces {
  TiledTensor tiled;
  std::vector<Tensor> buffers;  // per piece: the wider tensor the view is in
  std::vector<Tensor> views;
};

Pieces split(const Shape& shape, DType t, std::int64_t dim, const std::vector<std::int64_t>& cuts,
             bool views) {
  Pieces p{TiledTensor(shape, t, Device::cpu()), {}, {}};
  std::int64_t lo = 0;
  std::vector<std::int64_t> ends = cuts;
  ends.push_back(shape[static_cast<std::size_t>(dim)]);
  for (std::int64_t hi : ends) {
    Shape ps = shape;
    ps[static_cast<std::size_t>(dim)] = hi - lo;
    Tensor buf, view;
    if (views) {
      Shape wide = ps;
      wide[static_cast<std::size_t>(dim)] += 3;
      buf = Tensor::full(wide, 7.0, t);  // a sentinel around the view
      view = buf.narrow(dim, 1, hi - lo);
    } else {
      buf = view = Tensor::empty(ps, t);
    }
    Shape off(shape.size(), 0);
    off[static_cast<std::size_t>(dim)] = lo;
    p.tiled.add(view, off);
    p.buffers.push_back(buf);
    p.views.push_back(view);
    lo = hi;
  }
  return p;
}

struct Case {
  Shape input, weight;
  ConvParams params;
  std::int64_t dim;                // tensor dim the tiles split
  std::vector<std::int64_t> cuts;  // where
};

void check_case(const LocalConvKernels& k, const Case& c, DType t, bool views) {
  INFO(k.name() << " " << dtype_name(t) << " input " << shape_str(c.input) << " weight "
                << shape_str(c.weight) << " " << c.params.str() << " split dim " << c.dim
                << (views ? " (strided views)" : ""));
  const Tensor x = Tensor::rand(c.input, t, 41);
  const Tensor w = Tensor::rand(c.weight, t, 42);
  const Tensor b = Tensor::rand({c.weight[0]}, t, 43);
  const Shape out_shape = conv_output_shape(c.input, c.weight, c.params);
  const Tensor gy = Tensor::rand(out_shape, t, 44);
  const std::int64_t ksize = prod_from(c.weight, 2);
  const std::int64_t ocg = c.weight[0] / c.params.groups;

  Pieces in = split(c.input, t, c.dim, c.cuts, views);
  REQUIRE_FALSE(in.tiled.is_whole());
  in.tiled.scatter(x);  // the pieces now hold x

  const Tensor y_ref = ref_conv_forward(x, w, b, c.params);
  const Tensor y = k.forward(in.tiled, w, b, c.params);
  CHECK(max_abs_diff(y, y_ref) <= kernel_tolerance(t, c.weight[1] * ksize, max_abs(y_ref)));

  const ConvWeightGrads g = k.backward_weights(gy, in.tiled, c.weight, c.params, true);
  const Tensor gw_ref = ref_conv_grad_weight(gy, x, c.weight, c.params);
  const Tensor gb_ref = ref_conv_grad_bias(gy);
  const std::int64_t terms = c.input[0] * prod_from(out_shape, 2);
  CHECK(max_abs_diff(g.grad_weight, gw_ref) <= kernel_tolerance(t, terms, max_abs(gw_ref)));
  CHECK(max_abs_diff(g.grad_bias, gb_ref) <= kernel_tolerance(t, terms, max_abs(gb_ref)));

  Pieces out = split(c.input, t, c.dim, c.cuts, views);
  k.backward_data(gy, w, out.tiled, c.params);
  const Tensor gx_ref = ref_conv_grad_input(gy, w, c.input, c.params);
  CHECK(max_abs_diff(out.tiled.assemble(), gx_ref) <=
        kernel_tolerance(t, ocg * ksize, max_abs(gx_ref)));
  if (views)  // only the views were written: the sentinel columns are intact
    for (std::size_t i = 0; i < out.buffers.size(); ++i) {
      const Tensor& buf = out.buffers[i];
      CHECK(buf.narrow(c.dim, 0, 1).contiguous().item_flat(0) == 7.0);
      const std::int64_t tail = buf.size(c.dim) - 2;
      CHECK(max_abs_diff(buf.narrow(c.dim, tail, 2),
                         Tensor::full(buf.narrow(c.dim, tail, 2).shape(), 7.0, t)) == 0.0);
    }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      // Blocked layouts (channels a multiple of 16): tiles reordered in place.
      {{1, 32, 10, 13}, {32, 32, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}, 3, {1, 12}},
      {{2, 16, 9, 11}, {32, 16, 3, 2}, ConvParams{{2, 1}, {{1, 0}, {0, 2}}, {1, 2}, 1}, 3, {4, 5}},
      {{1, 32, 12, 9}, {32, 32, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}, 2, {2, 10}},  // along H
      {{1, 32, 11, 12}, {32, 1, 3, 3}, ConvParams{{1}, {{1, 1}}, {2}, 32}, 3, {3}},     // depthwise
      // Depthwise with kernels wider than 3x3 (the library's own f32 weight
      // gradient): tiles along W and along H, asymmetric padding.
      {{2, 24, 13, 37}, {24, 1, 7, 7}, ConvParams{{1}, {{3, 2}, {1, 4}}, {1}, 24}, 3, {3, 34}},
      {{1, 16, 21, 19}, {16, 1, 5, 3}, ConvParams{{1}, {{2, 2}, {0, 1}}, {1}, 16}, 2, {2, 18}},
      {{1, 16, 6, 7, 8}, {16, 16, 3, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}, 4, {1, 7}},
      {{2, 32, 40}, {64, 16, 5}, ConvParams{{1}, {{2, 2}}, {1}, 2}, 2, {2, 38}},
      // Channels that are no multiple of 16 (padded blocks or plain layouts):
      // the assembled fallback.
      {{1, 20, 9, 10}, {24, 20, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}, 3, {2, 8}},
      {{1, 3, 16, 17}, {16, 3, 7, 7}, ConvParams{{2}, {{3, 3}}, {1}, 1}, 3, {3, 14}},
  };
  return cs;
}

}  // namespace

TEST_CASE(
    "tiled local conv: forward, backward_data and backward_weights on tiled windows "
    "match the reference for every CPU backend and dtype",
    "[kernels][tiled]") {
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    const auto k = local_conv_kernels(Device::cpu(), t);
    for (const Case& c : cases()) {
      check_case(*k, c, t, false);
      check_case(*k, c, t, true);
    }
  }
}

TEST_CASE("tiled local conv: a whole tile and a degenerate window take the plain paths",
          "[kernels][tiled]") {
  const auto k = local_conv_kernels(Device::cpu(), DType::F32);
  const Tensor x = Tensor::rand({1, 16, 6, 6}, DType::F32, 1);
  const Tensor w = Tensor::rand({16, 16, 3, 3}, DType::F32, 2);
  const ConvParams p{{1}, {{1, 1}}, {1}, 1};
  CHECK(max_abs_diff(k->forward(TiledTensor::whole(x), w, Tensor(), p),
                     k->forward(x, w, Tensor(), p)) == 0.0);
  // A window of width 0 wholly in the padding: the output is the bias alone.
  const Tensor b = Tensor::rand({16}, DType::F32, 3);
  TiledTensor empty({1, 16, 6, 0}, DType::F32, Device::cpu());
  const ConvParams pad{{1}, {{1, 1}, {3, 0}}, {1}, 1};
  const Tensor y = k->forward(empty, w, b, pad);
  REQUIRE(y.shape() == Shape{1, 16, 6, 1});
  CHECK(y.item({0, 5, 2, 0}) == b.item({5}));
  TiledTensor grad_empty({1, 16, 6, 0}, DType::F32, Device::cpu());
  k->backward_data(Tensor::rand(y.shape(), DType::F32, 4), w, grad_empty, pad);  // writes nothing
}

TEST_CASE("TiledTensor: tiles must fit, not overlap, match dtype and device, and cover to assemble",
          "[tiled]") {
  TiledTensor tt({2, 3, 4}, DType::F32, Device::cpu());
  CHECK_THROWS_AS(tt.add(Tensor::zeros({2, 3, 5}, DType::F32), {0, 0, 0}), InvalidArgument);
  CHECK_THROWS_AS(tt.add(Tensor::zeros({2, 3, 2}, DType::F64), {0, 0, 0}), InvalidArgument);
  CHECK_THROWS_AS(tt.add(Tensor::zeros({2, 3}, DType::F32), {0, 0}), InvalidArgument);
  tt.add(Tensor::full({2, 3, 2}, 1.0, DType::F32), {0, 0, 0});
  CHECK_THROWS_WITH(tt.add(Tensor::zeros({2, 3, 2}, DType::F32), {0, 0, 1}),
                    Catch::Contains("overlaps"));
  CHECK_FALSE(tt.complete());
  CHECK_THROWS_WITH(tt.assemble(), Catch::Contains("do not cover"));
  tt.add(Tensor::full({2, 3, 1}, 2.0, DType::F32), {0, 0, 3});
  tt.add(Tensor::full({2, 3, 1}, 3.0, DType::F32), {0, 0, 2});
  REQUIRE(tt.complete());
  const Tensor a = tt.assemble();
  CHECK(a.item({1, 2, 0}) == 1.0);
  CHECK(a.item({1, 2, 1}) == 1.0);
  CHECK(a.item({1, 2, 2}) == 3.0);
  CHECK(a.item({1, 2, 3}) == 2.0);
  // A forward over incomplete tiles is the caller's error, named.
  const auto k = local_conv_kernels(Device::cpu(), DType::F32);
  TiledTensor part({1, 1, 4}, DType::F32, Device::cpu());
  part.add(Tensor::zeros({1, 1, 2}, DType::F32), {0, 0, 0});
  CHECK_THROWS_WITH(k->forward(part, Tensor::zeros({1, 1, 3}, DType::F32), Tensor(), ConvParams{}),
                    Catch::Contains("input") && Catch::Contains("cover"));
}

TEST_CASE(
    "forward_into writes a strided view of a larger output and nothing else, for every "
    "CPU backend, banded or whole",
    "[kernels][tiled]") {
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    for (const char* band_kb : {"1", "0"}) {  // many bands, or none
      const testing::ScopedConfig budget(
          [band_kb](Config& c) { c.onednn_band_kb = std::stoll(band_kb); });
      const auto k = local_conv_kernels(Device::cpu(), t);
      INFO(k->name() << " " << dtype_name(t) << " band KiB " << band_kb);
      const Tensor x = Tensor::rand({1, 16, 30, 12}, t, 1);
      const Tensor w = Tensor::rand({16, 16, 3, 3}, t, 2);
      const Tensor b = Tensor::rand({16}, t, 3);
      const ConvParams p{{1}, {{1, 1}}, {1}, 1};
      const Tensor y_ref = reference::ref_conv_forward(x, w, b, p);  // [1, 16, 30, 12]
      // The output lands in columns 2..13 of a wider tensor holding a sentinel.
      const Tensor wide = Tensor::full({1, 16, 30, 16}, 5.0, t);
      const Tensor view = wide.narrow(3, 2, 12);
      k->forward_into(TiledTensor::whole(x), w, b, p, view);
      CHECK(max_abs_diff(view, y_ref) <= kernel_tolerance(t, 16 * 9, max_abs(y_ref)));
      CHECK(max_abs_diff(wide.narrow(3, 0, 2), Tensor::full({1, 16, 30, 2}, 5.0, t)) == 0.0);
      CHECK(max_abs_diff(wide.narrow(3, 14, 2), Tensor::full({1, 16, 30, 2}, 5.0, t)) == 0.0);
      CHECK_THROWS_WITH(k->forward_into(TiledTensor::whole(x), w, b, p, wide),
                        Catch::Contains("out"));
    }
  }
}

TEST_CASE("TiledTensor::narrow cuts tiles to a range with offsets relative to its start",
          "[tiled]") {
  TiledTensor tt({1, 2, 10}, DType::F64, Device::cpu());
  const Tensor a = Tensor::rand({1, 2, 4}, DType::F64, 1),
               c = Tensor::rand({1, 2, 6}, DType::F64, 2);
  tt.add(a, {0, 0, 0});
  tt.add(c, {0, 0, 4});
  const TiledTensor n = tt.narrow(2, 3, 4);  // columns 3..6: one of a, three of c
  REQUIRE(n.shape() == Shape{1, 2, 4});
  REQUIRE(n.tiles().size() == 2);
  CHECK(n.tiles()[0].offset == Shape{0, 0, 0});
  CHECK(n.tiles()[1].offset == Shape{0, 0, 1});
  const Tensor whole = tt.assemble();
  CHECK(max_abs_diff(n.assemble(), whole.narrow(2, 3, 4)) == 0.0);
  CHECK(tt.narrow(2, 5, 0).tiles().empty());
  CHECK_THROWS_AS(tt.narrow(2, 8, 3), InvalidArgument);
}

TEST_CASE("TiledTensor::copy_to writes the tiles into a strided view and nothing else", "[tiled]") {
  TiledTensor tt({2, 3, 5}, DType::F64, Device::cpu());
  const Tensor a = Tensor::rand({2, 3, 2}, DType::F64, 3),
               b = Tensor::rand({2, 1, 3}, DType::F64, 4);
  tt.add(a, {0, 0, 0});
  tt.add(b, {0, 2, 2});  // rows 0-1 of columns 2-4 stay uncovered
  Tensor buf = Tensor::full({2, 5, 9}, -1.0, DType::F64);
  const Tensor view = buf.narrow(1, 1, 3).narrow(2, 2, 5);
  tt.copy_to(view);
  CHECK(max_abs_diff(view.narrow(2, 0, 2), a) == 0.0);
  CHECK(max_abs_diff(view.narrow(1, 2, 1).narrow(2, 2, 3), b) == 0.0);
  // Everything else, inside the view and around it, keeps its -1.
  Tensor expect = Tensor::full({2, 5, 9}, -1.0, DType::F64);
  expect.narrow(1, 1, 3).narrow(2, 2, 2).copy_(a);
  expect.narrow(1, 3, 1).narrow(2, 4, 3).copy_(b);
  CHECK(max_abs_diff(buf, expect) == 0.0);
  CHECK_THROWS_AS(tt.copy_to(Tensor::zeros({2, 3, 4}, DType::F64)), InvalidArgument);
}
