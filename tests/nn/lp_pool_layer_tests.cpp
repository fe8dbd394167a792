// nn::LPPool (torch.nn.LPPool2d) in a step as a user runs it: forward and
// autograd's input gradient with H sharded over 2 ranks, against naive f64
// loops written here from F.lp_pool2d's definition ((sum of x^p over each
// window)^(1/p); no padding; ceil_mode's partial window averaged over the
// inputs it covers, times the kernel's size, as PyTorch composes it).
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/nn/layers.h"
#include "dtensor/testing.h"
#include "tests/nn/nn_test_util.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

// out[n, c, i, j] and d sum(out * r) / dx for kernel k, stride s, ceil_mode.
struct Oracle {
  Tensor out, grad;
};

Oracle lp_pool_oracle(const Tensor& x, const Tensor& r, double p, std::int64_t k, std::int64_t s) {
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  // ceil_mode: ceil((L - k) / s) + 1 windows, less a last one that would
  // start past the input.
  const auto len = [&](std::int64_t L) {
    const std::int64_t o = (L - k + s - 1) / s + 1;
    return (o - 1) * s >= L ? o - 1 : o;
  };
  const std::int64_t OH = len(H), OW = len(W);
  Oracle o{Tensor::zeros({N, C, OH, OW}, DType::F64), Tensor::zeros(x.shape(), DType::F64)};
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t i = 0; i < OH; ++i)
        for (std::int64_t j = 0; j < OW; ++j) {
          double sum = 0;
          std::int64_t count = 0;
          for (std::int64_t a = i * s; a < std::min(i * s + k, H); ++a)
            for (std::int64_t b = j * s; b < std::min(j * s + k, W); ++b, ++count)
              sum += std::pow(x.item({n, c, a, b}), p);
          const double scaled = sum / static_cast<double>(count) * static_cast<double>(k * k);
          o.out.data<double>()[((n * C + c) * OH + i) * OW + j] = std::pow(scaled, 1 / p);
          const double outer = r.item({n, c, i, j}) * std::pow(scaled, 1 / p - 1) *
                               static_cast<double>(k * k) / static_cast<double>(count);
          for (std::int64_t a = i * s; a < std::min(i * s + k, H); ++a)
            for (std::int64_t b = j * s; b < std::min(j * s + k, W); ++b)
              o.grad.data<double>()[((n * C + c) * H + a) * W + b] +=
                  outer * std::pow(x.item({n, c, a, b}), p - 1);
        }
  return o;
}

}  // namespace

DTENSOR_TEST_CASE("nn::LPPool forward and autograd with H sharded over 2 ranks", "[nn][lp_pool]",
                  2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  // Positive inputs (x^p of a negative x is NaN for a fractional p).
  Tensor X = Tensor::rand({2, 3, 11, 9}, DType::F64, 4);
  for (std::int64_t i = 0; i < X.numel(); ++i)
    X.data<double>()[i] = 1.0 + X.data<double>()[i] / 2;
  const Tensor R = Tensor::rand({2, 3, 4, 3}, DType::F64, 5);
  for (const double p : {2.0, 2.5}) {
    nn::LPPool pool(p, {3}, {3}, /*ceil_mode=*/true);
    DTensor x = distribute_tensor(X, mesh, {Shard(2)}).requires_grad_(true);
    const DTensor y = pool.forward(x);
    REQUIRE(y.shape() == Shape{2, 3, 4, 3});
    backward(sum(mul(y, distribute_tensor(R, mesh, y.placements()))));
    const Oracle want = lp_pool_oracle(X, R, p, 3, 3);
    nn_test::require_close(y.full_tensor(), want.out, 1e-12, "lp_pool output");
    REQUIRE(x.grad().has_value());
    nn_test::require_close(x.grad()->full_tensor(), want.grad, 1e-12, "lp_pool input gradient");
  }
}
