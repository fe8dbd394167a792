// The CPU backend's loss kernels (dtensor/ops/kernels/loss.h), run directly
// on local tensors against naive f64 loops written here: the sums of
// (x - t)^2 and of -t * log_softmax(x) over the class dim 1, and their
// gradients, for sample-only [N, C] and spatial [N, C, d...] blocks, and a
// long f32 sum that a plain f32 accumulation would get wrong.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/loss.h"
#include "tests/ops/kernel_oracle.h"

using namespace dtensor;
using testing_kernels::tolerance;
using testing_kernels::values;

namespace {

bool close(double got, double want, DType dt) {
  return std::abs(got - want) <= tolerance(dt) * std::max(1.0, std::abs(want));
}

// (sum, gradient / scale) of -t * log_softmax(x) over dim 1, in f64.
std::pair<double, std::vector<double>> ref_cross_entropy(const std::vector<double>& x,
                                                         const std::vector<double>& t,
                                                         const Shape& shape) {
  const std::int64_t N = shape[0], C = shape[1], S = shape_numel(shape) / (N * C);
  double sum = 0;
  std::vector<double> g(x.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t s = 0; s < S; ++s) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((n * C + k) * S + s); };
      double m = -INFINITY, z = 0, tsum = 0;
      for (std::int64_t k = 0; k < C; ++k)
        m = std::max(m, x[at(k)]);
      for (std::int64_t k = 0; k < C; ++k) {
        z += std::exp(x[at(k)] - m);
        tsum += t[at(k)];
      }
      const double lse = m + std::log(z);
      for (std::int64_t k = 0; k < C; ++k) {
        sum -= t[at(k)] * (x[at(k)] - lse);
        g[at(k)] = std::exp(x[at(k)] - lse) * tsum - t[at(k)];
      }
    }
  return {sum, g};
}

void check_losses(DType dt, const Shape& shape, unsigned seed) {
  INFO(dtype_name(dt) << " " << shape_str(shape));
  // Inputs spread over [-4, 4); targets in [0, 1), not normalised per position.
  Tensor X64 = Tensor::rand(shape, DType::F64, seed);
  for (std::int64_t i = 0; i < X64.numel(); ++i)
    X64.data<double>()[i] = 8.0 * X64.data<double>()[i] - 4.0;
  const Tensor X = X64.to(dt);
  const Tensor T = Tensor::rand(shape, dt, seed + 1);
  const std::vector<double> x = values(X), t = values(T);
  const double scale = 0.37;

  Tensor sum = Tensor::empty({}, DType::F64);
  run_kernel(kernels::kMseLoss, DeviceType::CPU, dt, {X, T, sum});
  double ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    ref += (x[i] - t[i]) * (x[i] - t[i]);
  CHECK(close(sum.item_flat(0), ref, dt == DType::F64 ? dt : DType::F32));

  Tensor G = Tensor::full(shape, 9.0, dt);
  run_kernel(kernels::kMseLossBackward, DeviceType::CPU, dt, {X, T, scale, G});
  const std::vector<double> g = values(G);
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE(close(g[i], scale * (x[i] - t[i]), dt));

  const auto [ce, ce_grad] = ref_cross_entropy(x, t, shape);
  run_kernel(kernels::kCrossEntropy, DeviceType::CPU, dt, {X, T, sum});
  CHECK(close(sum.item_flat(0), ce, dt == DType::F64 ? dt : DType::F32));
  run_kernel(kernels::kCrossEntropyBackward, DeviceType::CPU, dt, {X, T, scale, G});
  const std::vector<double> gc = values(G);
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE(close(gc[i], scale * ce_grad[i], dt));
}

}  // namespace

TEST_CASE("loss kernels: sums and gradients against naive f64 loops", "[kernels]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    check_losses(dt, {4, 10}, 1);
    check_losses(dt, {2, 3, 5, 7}, 2);
    check_losses(dt, {1, 1, 9}, 3);
    check_losses(dt, {3, 4, 2, 3, 2}, 4);
  }
  // Enough samples and elements to run on the rank's threads.
  for (DType dt : {DType::F64, DType::F32})
    check_losses(dt, {8, 5, 64, 48}, 5);
}

TEST_CASE("loss kernels: a long f32 sum is as exact as a short one", "[kernels]") {
  const Shape shape{1, 1, std::int64_t{1} << 22};
  const Tensor X = Tensor::rand(shape, DType::F32, 7), T = Tensor::zeros(shape, DType::F32);
  const std::vector<double> x = values(X);
  double ref = 0;
  for (double v : x)
    ref += v * v;
  Tensor sum = Tensor::empty({}, DType::F64);
  run_kernel(kernels::kMseLoss, DeviceType::CPU, DType::F32, {X, T, sum});
  CHECK(std::abs(sum.item_flat(0) - ref) <= 1e-6 * ref);
}

TEST_CASE("loss kernels: an empty block sums to zero", "[kernels]") {
  const Tensor X = Tensor::empty({0, 3, 2}, DType::F32), T = Tensor::empty({0, 3, 2}, DType::F32);
  Tensor sum = Tensor::full({}, 5.0, DType::F64);
  run_kernel(kernels::kCrossEntropy, DeviceType::CPU, DType::F32, {X, T, sum});
  CHECK(sum.item_flat(0) == 0.0);
  run_kernel(kernels::kMseLoss, DeviceType::CPU, DType::F32, {X, T, sum});
  CHECK(sum.item_flat(0) == 0.0);
}
