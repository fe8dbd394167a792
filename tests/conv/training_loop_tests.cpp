// PyTorch's own tensor-parallel convolution test cases, scaled to this
// machine: a 10-step SGD loop on 2 ranks with the input sharded on W,
// compared step by step with the same loop in one process (the naive f64
// oracle) — weight, bias AND input gradients (the reference's tests skip the
// input gradient, which hid its bug).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/pointwise.h"
#include "tests/support/multiprocess.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::reference;

namespace {

// loss = 0.5 * sum(y^2), so grad_output = y; SGD with learning rate lr.
void sgd_loop(const Shape& input, const Shape& weight, const ConvParams& p, int shard_dim) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const double lr = 0.01;
  const Tensor X = Tensor::rand(input, DType::F64, 1);
  Tensor Wref = Tensor::rand(weight, DType::F64, 2);
  Tensor Bref = Tensor::rand({weight[0]}, DType::F64, 3);
  auto x = distribute_tensor(X, mesh, {Shard(shard_dim)});
  auto w = distribute_tensor(Wref, mesh, {Replicate()});
  auto b = distribute_tensor(Bref, mesh, {Replicate()});
  for (int step = 0; step < 10; ++step) {
    INFO("step " << step);
    auto y = convolution(x, w, b, p);
    auto g = convolution_backward(y, x, w, p);
    auto gw = g.grad_weight->redistribute(mesh, {Replicate()});
    auto gb = g.grad_bias->redistribute(mesh, {Replicate()});
    // The same step in one process.
    const Tensor Y = ref_conv_forward(X, Wref, Bref, p);
    const Tensor GX = ref_conv_grad_input(Y, Wref, input, p);
    const Tensor GW = ref_conv_grad_weight(Y, X, weight, p);
    const Tensor GB = ref_conv_grad_bias(Y);
    REQUIRE(max_abs_diff(y.full_tensor(), Y) < 1e-10 * std::max(1.0, max_abs(Y)));
    REQUIRE(max_abs_diff(g.grad_input->full_tensor(), GX) < 1e-10 * std::max(1.0, max_abs(GX)));
    REQUIRE(max_abs_diff(gw.to_local(), GW) < 1e-10 * std::max(1.0, max_abs(GW)));
    REQUIRE(max_abs_diff(gb.to_local(), GB) < 1e-10 * std::max(1.0, max_abs(GB)));
    w = add(w, scale(gw, -lr));
    b = add(b, scale(gb, -lr));
    for (std::int64_t i = 0; i < Wref.numel(); ++i)
      Wref.data<double>()[i] -= lr * GW.item_flat(i);
    for (std::int64_t i = 0; i < Bref.numel(); ++i)
      Bref.data<double>()[i] -= lr * GB.item_flat(i);
  }
  REQUIRE(max_abs_diff(w.to_local(), Wref) < 1e-9);
  REQUIRE(max_abs_diff(b.to_local(), Bref) < 1e-9);
}

}  // namespace

TEST_CASE("pytorch case: downsampling conv k4 s4 p0 S(3), 10 SGD steps on 2 ranks",
          "[conv][training][mp]") {
  run_ranks(2, [](RankContext&) {
    sgd_loop({2, 3, 8, 16}, {4, 3, 4, 4}, ConvParams{{4, 4}, {{0, 0}, {0, 0}}, {1, 1}, 1}, 3);
  });
}

TEST_CASE("pytorch case: depthwise conv k7 p3 groups=channels S(3), 10 SGD steps on 2 ranks",
          "[conv][training][mp]") {
  run_ranks(2, [](RankContext&) {
    sgd_loop({2, 8, 6, 20}, {8, 1, 7, 7}, ConvParams{{1, 1}, {{3, 3}, {3, 3}}, {1, 1}, 8}, 3);
  });
}

TEST_CASE("pytorch case: conv1d k3 p1 S(2), 10 SGD steps on 2 ranks", "[conv][training][mp]") {
  run_ranks(2, [](RankContext&) {
    sgd_loop({3, 4, 25}, {5, 4, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}, 2);
  });
}

TEST_CASE("pytorch case: conv3d k3 p1 S(4), 10 SGD steps on 2 ranks", "[conv][training][mp]") {
  run_ranks(2, [](RankContext&) {
    sgd_loop({1, 2, 5, 6, 10}, {3, 2, 3, 3, 3}, ConvParams{{1}, {{1, 1}}, {1}, 1}, 4);
  });
}
