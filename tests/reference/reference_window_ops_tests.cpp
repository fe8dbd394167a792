// The window-operator oracles (tools/reference/reference_window_ops.h) on
// small cases whose answers are derived by hand in the comments, from
// PyTorch's definitions. The oracles are what dtensor-op --check and the
// distributed tests trust, so they are pinned here independently of both the
// library and PyTorch.
#include <catch2/catch.hpp>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

#include "tools/reference/reference_window_ops.h"

using namespace dtensor;
using namespace dtensor::reference;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A [1, 1, values...] f64 tensor (one plane, 1-D).
Tensor row(std::initializer_list<double> values) {
  Tensor t = Tensor::zeros({1, 1, static_cast<std::int64_t>(values.size())}, DType::F64);
  std::int64_t i = 0;
  for (double v : values)
    t.data<double>()[i++] = v;
  return t;
}

Tensor of_shape(const Shape& shape, std::initializer_list<double> values) {
  Tensor t = Tensor::zeros(shape, DType::F64);
  REQUIRE(static_cast<std::int64_t>(values.size()) == t.numel());
  std::int64_t i = 0;
  for (double v : values)
    t.data<double>()[i++] = v;
  return t;
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64);
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// Element-wise equality (NaN equals NaN), with a tolerance for divisions.
void check_values(const Tensor& got, std::initializer_list<double> want) {
  const auto g = values(got);
  REQUIRE(g.size() == want.size());
  std::size_t i = 0;
  for (double w : want) {
    INFO("element " << i << ": got " << g[i] << ", want " << w);
    if (std::isnan(w))
      CHECK(std::isnan(g[i]));
    else
      CHECK(g[i] == Approx(w).margin(1e-12));
    ++i;
  }
}

PoolParams pool(std::int64_t k, std::int64_t s, std::int64_t pad, bool ceil_mode = false) {
  PoolParams p;
  p.kernel = {k};
  p.stride = {s};
  p.padding = {{pad, pad}};
  p.ceil_mode = ceil_mode;
  return p;
}

}  // namespace

TEST_CASE("reference: pool output lengths follow PyTorch's pooling_output_shape",
          "[reference][pool]") {
  // floor((L + pl + pr - d(k-1) - 1) / s) + 1
  CHECK(ref_pool_length(7, 3, 2, 1, 0, 0, false) == 3);  // (7-3)/2 + 1
  CHECK(ref_pool_length(6, 3, 2, 1, 1, 1, false) == 3);  // floor(5/2) + 1
  CHECK(ref_pool_length(6, 3, 2, 1, 1, 1, true) == 4);   // ceil(5/2) + 1; 3*2 = 6 < 6+1 kept
  // L=5, k=2, s=2, p=1, ceil: ceil(5/2) + 1 = 4, but window 3 starts at 3*2 = 6
  // >= L + pl = 6 (wholly in the right padding): dropped.
  CHECK(ref_pool_length(5, 2, 2, 1, 1, 1, true) == 3);
  CHECK(ref_pool_length(5, 2, 2, 1, 0, 0, true) == 3);  // ceil(3/2)+1; 2*2 = 4 < 5 kept
  CHECK(ref_pool_length(5, 2, 2, 1, 0, 0, false) == 2);
  CHECK(ref_pool_length(9, 3, 1, 2, 0, 0, false) == 5);  // dilated extent 5: 9-5+1
  CHECK(ref_pool_length(2, 3, 1, 1, 0, 0, false) == 0);  // empty
  // (L-1)s - 2p + d(k-1) + op + 1
  CHECK(ref_conv_transpose_length(2, 3, 2, 0, 0, 1) == 5);
  CHECK(ref_conv_transpose_length(2, 3, 2, 1, 1, 1) == 4);
  CHECK(ref_conv_transpose_length(4, 2, 1, 0, 0, 3) == 7);
}

TEST_CASE("reference: max_pool keeps the first of tied maxima", "[reference][pool]") {
  // x = [1, 3, 3, 2, 5], k=3, s=2: windows [0..2] -> 3 at index 1 (the tie at 2
  // is not greater), [2..4] -> 5 at index 4.
  const Tensor x = row({1, 3, 3, 2, 5});
  check_values(ref_max_pool_forward(x, pool(3, 2, 0)), {3, 5});
  check_values(ref_max_pool_grad_input(row({10, 20}), x, pool(3, 2, 0)), {0, 10, 0, 0, 20});

  // Padding 1 and ceil_mode: O = ceil((5+2-3)/2) + 1 = 3 (window 2 starts at
  // 4 < 6: kept). Windows {-1,0,1} -> {1,3}: 3 at 1; {1,2,3} -> 3,3,2: 3 at 1
  // again (tie); {3,4,5} -> {2,5}: 5 at 4. Gradients 10+20 reach index 1.
  const PoolParams p = pool(3, 2, 1, true);
  check_values(ref_max_pool_forward(x, p), {3, 3, 5});
  check_values(ref_max_pool_grad_input(row({10, 20, 30}), x, p), {0, 30, 0, 0, 30});
}

TEST_CASE("reference: max_pool takes a NaN, and the last of several", "[reference][pool]") {
  // One window over [1, NaN, 3, NaN, 2]: 1 (first), then NaN (isnan), 3 is not >
  // NaN, the second NaN replaces the first (isnan), 2 does not: NaN at index 3.
  const Tensor x = row({1, kNaN, 3, kNaN, 2});
  check_values(ref_max_pool_forward(x, pool(5, 1, 0)), {kNaN});
  check_values(ref_max_pool_grad_input(row({7}), x, pool(5, 1, 0)), {0, 0, 0, 7, 0});

  // k=2, s=1 over [4, NaN, 1]: windows {4, NaN} -> NaN at 1, {NaN, 1} -> NaN at 1.
  const Tensor y = row({4, kNaN, 1});
  check_values(ref_max_pool_forward(y, pool(2, 1, 0)), {kNaN, kNaN});
  check_values(ref_max_pool_grad_input(row({1, 2}), y, pool(2, 1, 0)), {0, 3, 0});
}

TEST_CASE("reference: 2-D max_pool scans the window in row-major order", "[reference][pool]") {
  // [[1, 4], [4, 2]] with a 2x2 kernel: the 4 at (0, 1) comes first in
  // row-major order and wins the tie with (1, 0).
  const Tensor x = of_shape({1, 1, 2, 2}, {1, 4, 4, 2});
  PoolParams p;
  p.kernel = {2};
  check_values(ref_max_pool_forward(x, p), {4});
  check_values(ref_max_pool_grad_input(of_shape({1, 1, 1, 1}, {5}), x, p), {0, 5, 0, 0});

  // Dilation 2 over a 1x5 row [9, 1, 8, 1, 7] with k=2 reads {0, 2}, {1, 3},
  // {2, 4}: 9, 1, 8.
  PoolParams d;
  d.kernel = {1, 2};
  d.stride = {1};
  d.dilation = {1, 2};
  check_values(ref_max_pool_forward(of_shape({1, 1, 1, 5}, {9, 1, 8, 1, 7}), d), {9, 1, 8});
}

TEST_CASE("reference: avg_pool with count_include_pad both ways and ceil_mode",
          "[reference][pool]") {
  // x = [1..6], k=3, s=2, padding 1, ceil_mode: O = ceil((6+2-3)/2) + 1 = 4
  // (window 3 starts at 3*2 = 6 < L + pl = 7: kept). start = o*2 - 1,
  // end = min(start + 3, L + pr = 7):
  //   o=0: [-1, 2): pool 3, clipped [0, 2): 1+2 = 3, count 2
  //   o=1: [1, 4):  pool 3, 2+3+4 = 9, count 3
  //   o=2: [3, 6):  pool 3, 4+5+6 = 15, count 3
  //   o=3: [5, 7):  pool 2 (end stops at L + pr), clipped [5, 6): 6, count 1
  const Tensor x = row({1, 2, 3, 4, 5, 6});
  PoolParams p = pool(3, 2, 1, true);
  p.count_include_pad = true;  // divisor = pool size: 3/3, 9/3, 15/3, 6/2
  check_values(ref_avg_pool_forward(x, p), {1, 3, 5, 3});
  // Backward with ones: 1/3 per element of windows 0-2, 1/2 for window 3.
  //   x0: w0 -> 1/3; x1: w0,w1 -> 2/3; x2: w1 -> 1/3; x3: w1,w2 -> 2/3;
  //   x4: w2 -> 1/3; x5: w2 (1/3) + w3 (1/2) -> 5/6.
  check_values(ref_avg_pool_grad_input(row({1, 1, 1, 1}), x.shape(), p),
               {1.0 / 3, 2.0 / 3, 1.0 / 3, 2.0 / 3, 1.0 / 3, 5.0 / 6});

  p.count_include_pad = false;  // divisor = clipped count: 3/2, 9/3, 15/3, 6/1
  check_values(ref_avg_pool_forward(x, p), {1.5, 3, 5, 6});
  //   x0: 1/2; x1: 1/2 + 1/3; x2: 1/3; x3: 2/3; x4: 1/3; x5: 1/3 + 1
  check_values(ref_avg_pool_grad_input(row({1, 1, 1, 1}), x.shape(), p),
               {0.5, 0.5 + 1.0 / 3, 1.0 / 3, 2.0 / 3, 1.0 / 3, 4.0 / 3});

  p.divisor_override = 2;  // sums / 2
  check_values(ref_avg_pool_forward(x, p), {1.5, 4.5, 7.5, 3});

  // Without ceil_mode: O = floor(5/2) + 1 = 3, the last window goes.
  check_values(ref_avg_pool_forward(x, pool(3, 2, 1, false)), {1, 3, 5});
}

TEST_CASE("reference: adaptive pools use [floor(iL/O), ceil((i+1)L/O))", "[reference][pool]") {
  // L=5, O=3: [0, 2), [1, 4), [3, 5).
  check_values(ref_adaptive_avg_pool_forward(row({1, 2, 3, 4, 5}), {3}), {1.5, 3, 4.5});
  // Gradient of ones: 1/2 | 1/2+1/3 | 1/3 | 1/3+1/2 | 1/2.
  check_values(ref_adaptive_avg_pool_grad_input(row({1, 1, 1}), {1, 1, 5}, {3}),
               {0.5, 0.5 + 1.0 / 3, 1.0 / 3, 1.0 / 3 + 0.5, 0.5});
  // [5, 1, 4, 4, 2]: {5, 1} -> 5 at 0; {1, 4, 4} -> 4 at 2 (first); {4, 2} -> 4 at 3.
  const Tensor x = row({5, 1, 4, 4, 2});
  check_values(ref_adaptive_max_pool_forward(x, {3}), {5, 4, 4});
  check_values(ref_adaptive_max_pool_grad_input(row({1, 2, 3}), x, {3}), {1, 0, 2, 3, 0});
  // O > L: L=2, O=3: [0, 1), [0, 2), [1, 2).
  check_values(ref_adaptive_avg_pool_forward(row({2, 4}), {3}), {2, 3, 4});
}

TEST_CASE("reference: pad in every mode, forward and backward", "[reference][pad]") {
  const Tensor x = row({1, 2, 3});
  // reflect (2, 2): output j reads j - 2 mirrored: -2 -> 2, -1 -> 1, 3 -> 1, 4 -> 0.
  check_values(ref_pad_forward(x, {{2, 2}}, PadMode::Reflect), {3, 2, 1, 2, 3, 2, 1});
  // Backward of ones: x0 is read by j = 2, 6 (2); x1 by j = 1, 3, 5 (3); x2 by j = 0, 4 (2).
  check_values(
      ref_pad_grad_input(row({1, 1, 1, 1, 1, 1, 1}), x.shape(), {{2, 2}}, PadMode::Reflect),
      {2, 3, 2});
  // replicate (2, 1): clamped.
  check_values(ref_pad_forward(x, {{2, 1}}, PadMode::Replicate), {1, 1, 1, 2, 3, 3});
  check_values(ref_pad_grad_input(row({1, 2, 3, 4, 5, 6}), x.shape(), {{2, 1}}, PadMode::Replicate),
               {1 + 2 + 3, 4, 5 + 6});
  // circular (1, 2): -1 -> 2, 3 -> 0, 4 -> 1.
  check_values(ref_pad_forward(x, {{1, 2}}, PadMode::Circular), {3, 1, 2, 3, 1, 2});
  check_values(ref_pad_grad_input(row({1, 2, 3, 4, 5, 6}), x.shape(), {{1, 2}}, PadMode::Circular),
               {2 + 5, 3 + 6, 1 + 4});
  // constant (-1, 2) with 9: the first element cropped, two 9s appended.
  check_values(ref_pad_forward(x, {{-1, 2}}, PadMode::Constant, 9.0), {2, 3, 9, 9});
  check_values(ref_pad_grad_input(row({1, 2, 3, 4}), x.shape(), {{-1, 2}}, PadMode::Constant),
               {0, 1, 2});
  // 2-D: [[1, 2], [3, 4]] reflect (1, 0) on H and (0, 1) on W:
  // rows -1 -> 1, 0, 1; columns 0, 1, 2 -> 0.
  check_values(
      ref_pad_forward(of_shape({1, 1, 2, 2}, {1, 2, 3, 4}), {{1, 0}, {0, 1}}, PadMode::Reflect),
      {3, 4, 3, 1, 2, 1, 3, 4, 3});
}

TEST_CASE("reference: conv_transpose scatters x[i] * w[k] to i*s - p + k*d",
          "[reference][conv_transpose]") {
  // x = [1, 2], w = [1, 10, 100], stride 2: O = (2-1)*2 + 2 + 1 = 5;
  // i=0 -> j=0,1,2: 1, 10, 100; i=1 -> j=2,3,4: 2, 20, 200.
  const Tensor x = row({1, 2}), w = row({1, 10, 100});
  ConvTransposeParams p;
  p.stride = {2};
  check_values(ref_conv_transpose_forward(x, w, Tensor(), p), {1, 10, 102, 20, 200});
  // + bias 0.5
  check_values(ref_conv_transpose_forward(x, w, of_shape({1}, {0.5}), p),
               {1.5, 10.5, 102.5, 20.5, 200.5});
  // padding 1 crops one from each side: O = 3.
  ConvTransposeParams padded = p;
  padded.padding = {1};
  check_values(ref_conv_transpose_forward(x, w, Tensor(), padded), {10, 102, 20});
  // output_padding 1 appends one output that nothing reaches.
  ConvTransposeParams extra = p;
  extra.output_padding = {1};
  check_values(ref_conv_transpose_forward(x, w, Tensor(), extra), {1, 10, 102, 20, 200, 0});

  // grad_input with gy = ones: every input reaches 3 outputs: 1 + 10 + 100.
  check_values(ref_conv_transpose_grad_input(row({1, 1, 1, 1, 1}), w, x.shape(), p), {111, 111});
  // grad_weight with gy = [1..5]: gw[k] = x0 * gy[k] + x1 * gy[2 + k] = 7, 10, 13.
  check_values(ref_conv_transpose_grad_weight(row({1, 2, 3, 4, 5}), x, w.shape(), p), {7, 10, 13});
  check_values(ref_conv_transpose_grad_bias(row({1, 2, 3, 4, 5})), {15});

  // groups 2, 1x1 kernel, two output channels per group: weight [2, 2, 1]
  // = [[1, 2], [3, 4]]; x channels a=1, b=5 -> outputs 1, 2, 15, 20.
  ConvTransposeParams g;
  g.groups = 2;
  check_values(ref_conv_transpose_forward(of_shape({1, 2, 1}, {1, 5}),
                                          of_shape({2, 2, 1}, {1, 2, 3, 4}), Tensor(), g),
               {1, 2, 15, 20});
}

TEST_CASE("reference: convolution with a padding_mode pads, then convolves", "[reference][conv]") {
  // x = [1, 2, 3], w = [1, 1, 1], padding 1.
  const Tensor x = row({1, 2, 3}), w = row({1, 1, 1});
  ConvParams p;
  p.padding = {{1, 1}};
  p.padding_mode = PaddingMode::Circular;  // [3, 1, 2, 3, 1] -> sums 6, 6, 6
  check_values(ref_conv_padding_mode_forward(x, w, Tensor(), p), {6, 6, 6});
  p.padding_mode = PaddingMode::Reflect;  // [2, 1, 2, 3, 2] -> 5, 6, 7
  check_values(ref_conv_padding_mode_forward(x, w, Tensor(), p), {5, 6, 7});
  // gy = [1, 0, 0] reaches padded [0, 3): padded 0 reads x1, 1 reads x0, 2 reads x1.
  check_values(ref_conv_padding_mode_grad_input(row({1, 0, 0}), w, x.shape(), p), {1, 2, 0});
  // gw[k] = sum_j gy[j] * padded[j + k] with gy = [1, 0, 0]: padded[0..2] = 2, 1, 2.
  check_values(ref_conv_padding_mode_grad_weight(row({1, 0, 0}), x, w.shape(), p), {2, 1, 2});
  p.padding_mode = PaddingMode::Replicate;  // [1, 1, 2, 3, 3] -> 4, 6, 8
  check_values(ref_conv_padding_mode_forward(x, w, Tensor(), p), {4, 6, 8});
  p.padding_mode = PaddingMode::Zeros;  // [0, 1, 2, 3, 0] -> 3, 6, 5
  check_values(ref_conv_padding_mode_forward(x, w, Tensor(), p), {3, 6, 5});
}
