// The CPU backend's upsample kernels (dtensor/ops/kernels/upsample.h), run
// directly on local tensors against naive f64 loops written here: every
// output is the sum over the product of its per-dim taps, and the backward
// adds each output's gradient times that weight at every tap. The taps are
// random (positions anywhere in the window, weights of either sign), so the
// kernels' row decomposition is checked, not only PyTorch's weight patterns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/upsample.h"
#include "tests/ops/kernel_oracle.h"

using namespace dtensor;
using kernels::ResampleTaps;
using testing_kernels::tolerance;
using testing_kernels::values;

namespace {

ResampleTaps random_taps(std::mt19937& rng, std::int64_t window, std::int64_t outputs, int taps) {
  std::uniform_int_distribution<std::int64_t> pos(0, window - 1);
  std::uniform_real_distribution<double> weight(-1.0, 1.0);
  ResampleTaps t;
  t.taps = taps;
  for (std::int64_t o = 0; o < outputs; ++o) {
    t.i0.push_back(pos(rng));
    t.i1.push_back(pos(rng));
    t.w0.push_back(weight(rng));
    t.w1.push_back(taps == 2 ? weight(rng) : 0.0);
  }
  return t;
}

// Positions and weights of output o of one dim (one or two taps).
std::vector<std::pair<std::int64_t, double>> taps_of(const ResampleTaps& t, std::int64_t o) {
  const auto k = static_cast<std::size_t>(o);
  std::vector<std::pair<std::int64_t, double>> out{{t.i0[k], t.w0[k]}};
  if (t.taps == 2) out.emplace_back(t.i1[k], t.w1[k]);
  return out;
}

// fn(plane, output flat index, window flat index, weight) over every
// (output, tap) pair, dims padded to three on the left.
template <typename Fn>
void for_each_tap(const Shape& window, const std::vector<ResampleTaps>& dims, Fn&& fn) {
  std::vector<ResampleTaps> d(3 - dims.size(), ResampleTaps{{0}, {0}, {1.0}, {0.0}, 1});
  d.insert(d.end(), dims.begin(), dims.end());
  std::int64_t win[3] = {1, 1, 1}, out[3];
  for (std::size_t i = 0; i < dims.size(); ++i)
    win[3 - dims.size() + i] = window[i + 2];
  for (std::size_t i = 0; i < 3; ++i)
    out[i] = static_cast<std::int64_t>(d[i].i0.size());
  for (std::int64_t p = 0; p < window[0] * window[1]; ++p)
    for (std::int64_t a = 0; a < out[0]; ++a)
      for (std::int64_t b = 0; b < out[1]; ++b)
        for (std::int64_t c = 0; c < out[2]; ++c)
          for (auto [ia, wa] : taps_of(d[0], a))
            for (auto [ib, wb] : taps_of(d[1], b))
              for (auto [ic, wc] : taps_of(d[2], c))
                fn(p, ((p * out[0] + a) * out[1] + b) * out[2] + c,
                   ((p * win[0] + ia) * win[1] + ib) * win[2] + ic, wa * wb * wc);
}

// `views`: the forward reads its window and writes its output as views
// inside larger tensors (the slot's contract allows it), through their
// strides, touching nothing outside them.
void check_upsample(DType dt, const Shape& window, const std::vector<std::int64_t>& outputs,
                    int taps, unsigned seed, bool views = false) {
  INFO(dtype_name(dt) << " window " << shape_str(window) << " taps " << taps
                      << (views ? " as views" : ""));
  std::mt19937 rng(seed);
  std::vector<ResampleTaps> dims;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    dims.push_back(random_taps(rng, window[i + 2], outputs[i], taps));
  const Shape out_shape = kernels::resample_output_shape(window, dims);

  const Tensor big_x = Tensor::rand(views ? testing_kernels::grown(window) : window, dt, seed + 1);
  const Tensor X = views ? testing_kernels::inner_view(big_x, window) : big_x;
  const Tensor big_y = Tensor::full(views ? testing_kernels::grown(out_shape) : out_shape, 7.0, dt);
  Tensor Y = views ? testing_kernels::inner_view(big_y, out_shape) : big_y;
  run_kernel(kernels::kUpsampleForward, DeviceType::CPU, dt, {X, dims, Y});
  if (views) REQUIRE(testing_kernels::untouched_outside(big_y, out_shape, 7.0));
  const std::vector<double> x = values(X);
  std::vector<double> ref(static_cast<std::size_t>(shape_numel(out_shape)), 0.0);
  for_each_tap(window, dims, [&](std::int64_t, std::int64_t o, std::int64_t i, double w) {
    ref[static_cast<std::size_t>(o)] += w * x[static_cast<std::size_t>(i)];
  });
  const std::vector<double> y = values(Y);
  for (std::size_t k = 0; k < ref.size(); ++k)
    REQUIRE(std::abs(y[k] - ref[k]) <= tolerance(dt) * std::max(1.0, std::abs(ref[k])));

  // With `views` the backward reads grad_output as a view and adds
  // (accumulate) into a view holding 1 everywhere: 1 + the gradient, and
  // nothing outside the view moves.
  const Tensor big_gy =
      Tensor::rand(views ? testing_kernels::grown(out_shape) : out_shape, dt, seed + 2);
  const Tensor GY = views ? testing_kernels::inner_view(big_gy, out_shape) : big_gy;
  const Tensor big_gx = Tensor::full(views ? testing_kernels::grown(window) : window, 7.0, dt);
  Tensor GX = views ? testing_kernels::inner_view(big_gx, window) : big_gx;
  if (views) GX.fill_(1.0);  // added into; without views, overwritten
  run_kernel(kernels::kUpsampleBackward, DeviceType::CPU, dt, {GY, dims, GX, views});
  if (views) REQUIRE(testing_kernels::untouched_outside(big_gx, window, 7.0));
  const std::vector<double> gy = values(GY);
  std::vector<double> gref(static_cast<std::size_t>(shape_numel(window)), views ? 1.0 : 0.0);
  for_each_tap(window, dims, [&](std::int64_t, std::int64_t o, std::int64_t i, double w) {
    gref[static_cast<std::size_t>(i)] += w * gy[static_cast<std::size_t>(o)];
  });
  const std::vector<double> gx = values(GX);
  for (std::size_t k = 0; k < gref.size(); ++k)
    REQUIRE(std::abs(gx[k] - gref[k]) <= tolerance(dt) * std::max(1.0, std::abs(gref[k])));
}

}  // namespace

TEST_CASE("upsample kernels: forward and backward against naive f64 loops", "[kernels]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16})
    for (int taps : {1, 2}) {
      check_upsample(dt, {2, 3, 7}, {13}, taps, 10);
      check_upsample(dt, {1, 2, 5, 4}, {3, 9}, taps, 20);
      check_upsample(dt, {2, 1, 3, 4, 5}, {6, 2, 7}, taps, 30);
      check_upsample(dt, {1, 1, 1}, {1}, taps, 40);
    }
  // Enough planes and outputs to run on the rank's threads.
  for (DType dt : {DType::F64, DType::F32})
    check_upsample(dt, {4, 8, 16, 16}, {32, 32}, 2, 50);
}

TEST_CASE(
    "upsample kernels: the forward reads and writes views through their strides, the "
    "backward adds into a view",
    "[kernels]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16})
    for (int taps : {1, 2}) {
      check_upsample(dt, {2, 3, 7}, {13}, taps, 60, true);
      check_upsample(dt, {1, 2, 5, 4}, {3, 9}, taps, 70, true);
      check_upsample(dt, {2, 1, 3, 4, 5}, {6, 2, 7}, taps, 80, true);
    }
  check_upsample(DType::F32, {4, 8, 16, 16}, {32, 32}, 2, 90, true);
}

TEST_CASE("upsample kernels: taps outside the window are the library's bug, named", "[kernels]") {
  std::vector<ResampleTaps> dims{{{0, 5}, {0, 0}, {1.0, 1.0}, {0.0, 0.0}, 1}};
  const Tensor X = Tensor::rand({1, 1, 4}, DType::F32, 1);
  Tensor Y = Tensor::empty({1, 1, 2}, DType::F32);
  CHECK_THROWS_AS(run_kernel(kernels::kUpsampleForward, DeviceType::CPU, DType::F32, {X, dims, Y}),
                  InvalidArgument);
}
