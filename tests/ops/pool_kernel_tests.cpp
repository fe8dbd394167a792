// The CPU backend's max-pool kernels (dtensor/ops/kernels/pool.h), run
// directly on local tensors against naive f64 loops written here. Values lie
// on a coarse grid with NaN and -inf sprinkled in, so ties (the first maximum
// in kernel order wins), NaN (it wins, the last one) and all--inf windows are
// exercised. Regular taps (every output reads the same pattern, e.g. 2x2
// stride 2: the kernels' vector path) and clipped ones (padding: the general
// path) both run, forward and backward.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/pool.h"
#include "tests/ops/kernel_oracle.h"

using namespace dtensor;
using kernels::PoolTaps;
using testing_kernels::values;

namespace {

// Taps of one dim: output o reads o * stride - pad + k * dilation for k <
// kernel, the positions inside [0, window) only.
PoolTaps sliding(std::int64_t window, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                 std::int64_t dilation) {
  PoolTaps t;
  const std::int64_t span = (kernel - 1) * dilation + 1;
  for (std::int64_t o = 0; o * stride - pad + span <= window + pad; ++o) {
    std::vector<std::int64_t> taps;
    for (std::int64_t k = 0; k < kernel; ++k) {
      const std::int64_t i = o * stride - pad + k * dilation;
      if (i >= 0 && i < window) taps.push_back(i);
    }
    t.taps.push_back(taps);
    t.padded_size.push_back(kernel);
  }
  return t;
}

Tensor grid_values(const Shape& shape, DType dt, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> v(-3, 3);
  Tensor t = Tensor::empty(shape, DType::F64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    p[i] = v(rng) * 0.5;
    if (i % 17 == 5) p[i] = std::nan("");
    if (i % 13 == 7) p[i] = -std::numeric_limits<double>::infinity();
  }
  return t.to(dt);
}

// The tap (flat index into the window) each output picks, PyTorch's rule.
std::vector<std::int64_t> picks(const std::vector<double>& x, const Shape& window,
                                const std::vector<PoolTaps>& dims) {
  const std::int64_t h = window[2], w = window[3];
  const std::int64_t oh = static_cast<std::int64_t>(dims[0].taps.size());
  const std::int64_t ow = static_cast<std::int64_t>(dims[1].taps.size());
  std::vector<std::int64_t> out;
  for (std::int64_t p = 0; p < window[0] * window[1]; ++p)
    for (std::int64_t a = 0; a < oh; ++a)
      for (std::int64_t b = 0; b < ow; ++b) {
        double best = -std::numeric_limits<double>::infinity();
        std::int64_t at = -1;
        for (auto i : dims[0].taps[static_cast<std::size_t>(a)])
          for (auto j : dims[1].taps[static_cast<std::size_t>(b)]) {
            const std::int64_t k = (p * h + i) * w + j;
            const double v = x[static_cast<std::size_t>(k)];
            if (at < 0) at = k;
            if (v > best || std::isnan(v)) {
              best = v;
              at = k;
            }
          }
        out.push_back(at);
      }
  return out;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

// `views`: the forward reads its window and writes its output as views
// inside larger tensors (the slot's contract allows it; the handlers run it
// on tiles of a halo window and bands of the output), which must be read
// and written through their strides, nothing outside them touched.
void check_max_pool(DType dt, const Shape& window, const std::vector<PoolTaps>& dims, unsigned seed,
                    bool views = false) {
  INFO(dtype_name(dt) << " window " << shape_str(window) << (views ? " as views" : ""));
  const Shape out_shape{window[0], window[1], static_cast<std::int64_t>(dims[0].taps.size()),
                        static_cast<std::int64_t>(dims[1].taps.size())};
  const Tensor big_x = grid_values(views ? testing_kernels::grown(window) : window, dt, seed);
  const Tensor X = views ? testing_kernels::inner_view(big_x, window) : big_x;
  const Tensor big_y = Tensor::full(views ? testing_kernels::grown(out_shape) : out_shape, 7.0, dt);
  Tensor Y = views ? testing_kernels::inner_view(big_y, out_shape) : big_y;
  run_kernel(kernels::kMaxPoolForward, DeviceType::CPU, dt, {X, dims, Y});
  if (views) REQUIRE(testing_kernels::untouched_outside(big_y, out_shape, 7.0));
  const std::vector<double> x = values(X), y = values(Y);
  const std::vector<std::int64_t> at = picks(x, window, dims);
  for (std::size_t o = 0; o < at.size(); ++o) {
    const double want =
        at[o] < 0 ? -std::numeric_limits<double>::infinity() : x[static_cast<std::size_t>(at[o])];
    INFO("output " << o);
    REQUIRE(same(y[o], want));
  }

  // Backward: varied gradients (small integers: their sums stay exact in bf16) so a
  // gradient added at the wrong tap of a tie shows.
  // With `views` it adds (accumulate) into a view laid out as X, holding 1
  // everywhere, and reads grad_output as a view: the result is 1 + the
  // gradient, and nothing outside the view moves.
  Tensor GY = Tensor::empty(out_shape, DType::F64);
  for (std::int64_t i = 0; i < GY.numel(); ++i)
    GY.data<double>()[i] = static_cast<double>(i % 7 + 1);
  GY = GY.to(dt);
  if (views) {
    Tensor big_gy = Tensor::full(testing_kernels::grown(out_shape), 7.0, dt);
    testing_kernels::inner_view(big_gy, out_shape).copy_(GY);
    GY = testing_kernels::inner_view(big_gy, out_shape);
  }
  const Tensor big_gx = Tensor::full(views ? testing_kernels::grown(window) : window, 7.0, dt);
  Tensor GX = views ? testing_kernels::inner_view(big_gx, window) : big_gx;
  if (views) GX.fill_(1.0);  // added into; without views, overwritten
  run_kernel(kernels::kMaxPoolBackward, DeviceType::CPU, dt, {X, GY, dims, GX, views});
  if (views) REQUIRE(testing_kernels::untouched_outside(big_gx, window, 7.0));
  std::vector<double> ref(static_cast<std::size_t>(X.numel()), views ? 1.0 : 0.0);
  const std::vector<double> gy = values(GY);
  for (std::size_t o = 0; o < at.size(); ++o)
    if (at[o] >= 0) ref[static_cast<std::size_t>(at[o])] += gy[o];
  const std::vector<double> gx = values(GX);
  for (std::size_t k = 0; k < ref.size(); ++k) {
    INFO("window element " << k);
    REQUIRE(gx[k] == ref[k]);
  }
}

}  // namespace

TEST_CASE("max-pool kernels: regular and clipped taps, ties and NaN, against f64 loops",
          "[kernels]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    // Regular rows: the vector path (2x2 stride 2; 3x3 stride 1; dilated; odd widths).
    check_max_pool(dt, {2, 3, 8, 16}, {sliding(8, 2, 2, 0, 1), sliding(16, 2, 2, 0, 1)}, 1);
    check_max_pool(dt, {1, 2, 7, 9}, {sliding(7, 3, 1, 0, 1), sliding(9, 3, 1, 0, 1)}, 2);
    check_max_pool(dt, {1, 2, 9, 11}, {sliding(9, 2, 3, 0, 2), sliding(11, 3, 2, 0, 2)}, 3);
    check_max_pool(dt, {1, 1, 5, 1}, {sliding(5, 2, 2, 0, 1), sliding(1, 1, 1, 0, 1)}, 4);
    // Clipped rows (padding): the general path.
    check_max_pool(dt, {2, 2, 7, 10}, {sliding(7, 3, 2, 1, 1), sliding(10, 3, 2, 1, 1)}, 5);
  }
  // Enough planes to run on the rank's threads.
  check_max_pool(DType::F32, {4, 16, 32, 64}, {sliding(32, 2, 2, 0, 1), sliding(64, 2, 2, 0, 1)},
                 6);
}

TEST_CASE(
    "max-pool kernels: the forward reads and writes views through their strides, the "
    "backward adds into a view",
    "[kernels]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    check_max_pool(dt, {2, 3, 8, 16}, {sliding(8, 2, 2, 0, 1), sliding(16, 2, 2, 0, 1)}, 11, true);
    check_max_pool(dt, {2, 2, 7, 10}, {sliding(7, 3, 2, 1, 1), sliding(10, 3, 2, 1, 1)}, 12, true);
    check_max_pool(dt, {1, 2, 9, 11}, {sliding(9, 2, 3, 0, 2), sliding(11, 3, 2, 0, 2)}, 13, true);
  }
  check_max_pool(DType::F32, {4, 16, 32, 64}, {sliding(32, 2, 2, 0, 1), sliding(64, 2, 2, 0, 1)},
                 14, true);
}
