// nn::Flatten, nn::PixelShuffle and nn::PixelUnshuffle on 1 and 2 ranks and
// a 2x2 mesh, H sharded (evenly and not), forward and gradient against index
// loops over the global tensors written from torch's definitions.
#include <catch2/catch.hpp>

#include <functional>

#include "dtensor/core/device_mesh.h"
#include "dtensor/nn/layers.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/pointwise.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

using Int = std::int64_t;

// torch.nn.PixelShuffle on [N, C r^2, H, W]: out[n, c, h r + i, w r + j] =
// in[n, c r^2 + i r + j, h, w]. Returns, per output element (flat), the input
// element (flat) it is, and the output shape.
std::pair<Shape, std::vector<Int>> pixel_shuffle_map(const Shape& in, Int r) {
  const Int N = in[0], C = in[1] / (r * r), H = in[2], W = in[3];
  const Shape out{N, C, H * r, W * r};
  std::vector<Int> src;
  for (Int n = 0; n < N; ++n)
    for (Int c = 0; c < C; ++c)
      for (Int y = 0; y < H * r; ++y)
        for (Int x = 0; x < W * r; ++x) {
          const Int h = y / r, i = y % r, w = x / r, j = x % r;
          src.push_back(((n * in[1] + c * r * r + i * r + j) * H + h) * W + w);
        }
  return {out, src};
}

// torch.nn.PixelUnshuffle on [N, C, H r, W r]: out[n, c r^2 + i r + j, h, w] =
// in[n, c, h r + i, w r + j].
std::pair<Shape, std::vector<Int>> pixel_unshuffle_map(const Shape& in, Int r) {
  const Int N = in[0], C = in[1], H = in[2] / r, W = in[3] / r;
  const Shape out{N, C * r * r, H, W};
  std::vector<Int> src;
  for (Int n = 0; n < N; ++n)
    for (Int k = 0; k < C * r * r; ++k)
      for (Int h = 0; h < H; ++h)
        for (Int w = 0; w < W; ++w) {
          const Int c = k / (r * r), i = (k / r) % r, j = k % r;
          src.push_back(((n * C + c) * in[2] + h * r + i) * in[3] + w * r + j);
        }
  return {out, src};
}

std::pair<Shape, std::vector<Int>> identity_map(const Shape& in, const Shape& out) {
  std::vector<Int> src(static_cast<std::size_t>(shape_numel(in)));
  for (std::size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<Int>(i);
  return {out, src};
}

void check_module(nn::Module& m, const DeviceMesh& mesh, const Shape& in, const Placements& p,
                  const std::pair<Shape, std::vector<Int>>& oracle, const std::string& what) {
  INFO(what << " on " << shape_str(in) << " placed " << placements_str(p));
  const Tensor X = Tensor::rand(in, DType::F64, 21);
  DTensor x = distribute_tensor(X, mesh, p);
  x.requires_grad_();
  const DTensor y = m.forward(x);
  REQUIRE(y.shape() == oracle.first);
  const Tensor Y = y.full_tensor();
  const Tensor G = Tensor::rand(oracle.first, DType::F64, 22);
  Tensor gx = Tensor::zeros(in, DType::F64);
  double err = 0;
  for (std::size_t i = 0; i < oracle.second.size(); ++i) {
    const Int j = oracle.second[i];
    err = std::max(err, std::abs(Y.item_flat(static_cast<Int>(i)) - X.item_flat(j)));
    gx.data<double>()[j] += G.item_flat(static_cast<Int>(i));
  }
  CHECK(err == 0);
  backward(sum(mul(y, distribute_tensor(G, mesh, y.placements()))));
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->spec() == x.spec());
  CHECK(max_abs_diff(x.grad()->full_tensor(), gx) == 0);
}

void check_all(const DeviceMesh& mesh, const std::vector<Placements>& placements) {
  for (const auto& p : placements) {
    nn::PixelShuffle shuffle(2);
    check_module(shuffle, mesh, {2, 8, 4, 3}, p, pixel_shuffle_map({2, 8, 4, 3}, 2),
                 "PixelShuffle(2)");
    check_module(shuffle, mesh, {1, 4, 5, 3}, p, pixel_shuffle_map({1, 4, 5, 3}, 2),
                 "PixelShuffle(2), odd H");
    nn::PixelShuffle shuffle3(3);
    check_module(shuffle3, mesh, {1, 9, 3, 2}, p, pixel_shuffle_map({1, 9, 3, 2}, 3),
                 "PixelShuffle(3)");
    nn::PixelUnshuffle unshuffle(2);
    check_module(unshuffle, mesh, {2, 3, 8, 6}, p, pixel_unshuffle_map({2, 3, 8, 6}, 2),
                 "PixelUnshuffle(2)");
    check_module(unshuffle, mesh, {1, 2, 6, 4}, p, pixel_unshuffle_map({1, 2, 6, 4}, 2),
                 "PixelUnshuffle(2), H / r odd");
    nn::Flatten flat;
    check_module(flat, mesh, {2, 3, 4, 5}, p, identity_map({2, 3, 4, 5}, {2, 60}), "Flatten()");
    nn::Flatten flat_hw(2, 3);
    check_module(flat_hw, mesh, {2, 3, 4, 5}, p, identity_map({2, 3, 4, 5}, {2, 3, 20}),
                 "Flatten(2, 3)");
  }
}

}  // namespace

TEST_CASE("Flatten, PixelShuffle and PixelUnshuffle on one rank", "[nn][views]") {
  run_ranks(1, [](RankContext&) {
    check_all(DeviceMesh(DeviceType::CPU, {1}), {{Replicate()}, {Shard(2)}});
  });
}

TEST_CASE("Flatten, PixelShuffle and PixelUnshuffle with H or W sharded over 2 ranks",
          "[nn][views][mp]") {
  run_ranks(2, [](RankContext&) {
    check_all(DeviceMesh(DeviceType::CPU, {2}), {{Shard(2)}, {Shard(3)}, {Shard(0)}});
  });
}

TEST_CASE("Flatten, PixelShuffle and PixelUnshuffle on a 2x2 mesh", "[nn][views][mp]") {
  run_ranks(4, [](RankContext&) {
    check_all(DeviceMesh(DeviceType::CPU, {2, 2}), {{Shard(0), Shard(2)}, {Shard(2), Shard(3)}});
  });
}

TEST_CASE("a PixelShuffle with H sharded evenly keeps H sharded", "[nn][views][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    nn::PixelShuffle shuffle(2);
    const auto x = distribute_tensor(Tensor::rand({1, 8, 4, 4}, DType::F32, 1), mesh, {Shard(2)});
    CHECK(shuffle.forward(x).placements() == Placements{Shard(2)});
    nn::PixelUnshuffle unshuffle(2);
    CHECK(unshuffle.forward(x).placements() == Placements{Shard(2)});
  });
}

TEST_CASE("PixelShuffle and PixelUnshuffle refuse bad shapes and factors", "[nn][views]") {
  run_ranks(1, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {1});
    const auto x =
        distribute_tensor(Tensor::rand({1, 6, 4, 5}, DType::F32, 1), mesh, {Replicate()});
    CHECK_THROWS_WITH(nn::PixelShuffle(2).forward(x), Catch::Contains("input:"));
    CHECK_THROWS_WITH(nn::PixelUnshuffle(2).forward(x), Catch::Contains("input:"));
    CHECK_THROWS_WITH(nn::PixelShuffle(0), Catch::Contains("upscale_factor:"));
    CHECK_THROWS_WITH(nn::PixelUnshuffle(-1), Catch::Contains("downscale_factor:"));
    const auto flat = distribute_tensor(Tensor::rand({6}, DType::F32, 1), mesh, {Replicate()});
    CHECK_THROWS_WITH(nn::PixelShuffle(1).forward(flat), Catch::Contains("input:"));
  });
}
