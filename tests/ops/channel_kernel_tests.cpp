// The CPU backend's per-channel kernels (dtensor/ops/kernels/channel.h)
// against naive f64 loops: a bias added along dim 1 and sums over every dim
// but 1, in every CPU dtype, with a long f32 row whose sum must stay exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/channel.h"
#include "tests/ops/kernel_oracle.h"

using namespace dtensor;
using testing_kernels::tolerance;
using testing_kernels::values;

namespace {

void check_channel(DType dt, const Shape& shape, unsigned seed) {
  INFO(dtype_name(dt) << " " << shape_str(shape));
  const std::int64_t n = shape[0], c = shape[1], inner = shape_numel(shape) / (n * c);
  const Tensor X = Tensor::rand(shape, dt, seed);
  const Tensor B = Tensor::rand({c}, dt, seed + 1);
  const std::vector<double> x = values(X), b = values(B);

  Tensor Y = X.clone();
  run_kernel(kernels::kChannelBias, DeviceType::CPU, dt, {Y, B});
  const std::vector<double> y = values(Y);
  for (std::int64_t i = 0; i < X.numel(); ++i) {
    const double want = x[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i / inner % c)];
    REQUIRE(std::abs(y[static_cast<std::size_t>(i)] - want) <=
            tolerance(dt) * std::max(1.0, std::abs(want)));
  }

  Tensor S = Tensor::empty({c}, DType::F64);
  run_kernel(kernels::kChannelSums, DeviceType::CPU, dt, {X, S});
  std::vector<double> want(static_cast<std::size_t>(c), 0.0);
  for (std::int64_t i = 0; i < X.numel(); ++i)
    want[static_cast<std::size_t>(i / inner % c)] += x[static_cast<std::size_t>(i)];
  for (std::int64_t k = 0; k < c; ++k) {
    const double w = want[static_cast<std::size_t>(k)];
    // Each input is exact in f64 (read back as it is stored), so only the
    // summation's rounding is measured: f32 lanes over blocks of 1024, f64
    // across. A lane adds 1024 / lanes values, 128 on AVX2 (1.3e-6 of the
    // sum seen on 20000 values), 64 with AVX-512; one value left out would
    // be 5e-5.
    REQUIRE(std::abs(S.data<double>()[k] - w) <=
            (dt == DType::F64 ? 1e-12 : 4e-6) * std::max(1.0, std::abs(w)));
  }
}

}  // namespace

TEST_CASE("channel kernels: bias and sums against naive f64 loops", "[kernels]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    check_channel(dt, {2, 3, 5, 7}, 1);
    check_channel(dt, {1, 4, 9}, 2);
    check_channel(dt, {3, 2, 2, 3, 4}, 3);
  }
  // Rows long enough for blocks and the rank's threads.
  check_channel(DType::F32, {2, 16, 100, 100}, 4);
}
