// Convolution strategies other than the halo path: batch, channel, filter,
// replicated and Partial inputs, and the placements of the gradients.
#include <catch2/catch.hpp>

#include "tests/conv/conv_case.h"
#include "tests/support/multiprocess.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {
ConvCase base_case(Shape mesh, Placements in, Placements w = {}) {
  ConvCase c;
  c.input = {4, 6, 9, 8};
  c.out_channels = 6;
  c.kernel = {3, 3};
  c.params = ConvParams{{1, 2}, {{1, 1}, {0, 2}}, {1, 1}, 1};
  c.mesh = std::move(mesh);
  c.input_placements = std::move(in);
  c.weight_placements = std::move(w);
  c.seed = 5;
  return c;
}
}  // namespace

TEST_CASE("conv batch parallel S(0): no halo, grads Partial P=2", "[conv][strategy][mp]") {
  run_ranks(2, [](RankContext&) { check_conv_case(base_case({2}, {Shard(0)})); });
}

TEST_CASE("conv channel parallel: input S(1) with weight S(1) gives a Partial output P=3",
          "[conv][strategy][mp]") {
  run_ranks(3, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    auto c = base_case({3}, {Shard(1)}, {Shard(1)});
    check_conv_case(c);
    auto x = distribute_tensor(Tensor::rand(c.input, DType::F64, 1), mesh, {Shard(1)});
    auto w = distribute_tensor(Tensor::rand({6, 6, 3, 3}, DType::F64, 2), mesh, {Shard(1)});
    auto y = convolution(x, w, std::nullopt, c.params);
    REQUIRE(y.placements() == Placements{Partial()});
  });
}

TEST_CASE("conv filter parallel: weight S(0) with a replicated input gives output S(1) P=2",
          "[conv][strategy][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    auto c = base_case({2}, {Replicate()}, {Shard(0)});
    check_conv_case(c);
    auto x = distribute_tensor(Tensor::rand(c.input, DType::F64, 1), mesh, {Replicate()});
    auto w = distribute_tensor(Tensor::rand({6, 6, 3, 3}, DType::F64, 2), mesh, {Shard(0)});
    auto b = distribute_tensor(Tensor::rand({6}, DType::F64, 3), mesh, {Shard(0)});
    REQUIRE(convolution(x, w, b, c.params).placements() == Placements{Shard(1)});
  });
}

TEST_CASE("conv batch on one mesh dim and W halo on the other, 2x2 mesh", "[conv][strategy][mp]") {
  run_ranks(4, [](RankContext&) {
    check_conv_case(base_case({2, 2}, {Shard(0), Shard(3)}));
    check_conv_case(base_case({2, 2}, {Shard(2), Shard(3)}));
    check_conv_case(base_case({2, 2}, {Replicate(), Shard(2)}));
  });
}

TEST_CASE("conv gradient placements: Partial exactly on the mesh dims sharding input or batch",
          "[conv][strategy][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const ConvParams p{{1}, {{1, 1}}, {1}, 1};
    auto x =
        distribute_tensor(Tensor::rand({2, 3, 8, 8}, DType::F64, 1), mesh, {Shard(2), Replicate()});
    auto w = distribute_tensor(Tensor::rand({4, 3, 3, 3}, DType::F64, 2), mesh,
                               {Replicate(), Replicate()});
    auto y = convolution(x, w, std::nullopt, p);
    auto g = convolution_backward(y, x, w, p);
    REQUIRE(g.grad_weight->placements() == Placements{Partial(), Replicate()});
    REQUIRE(g.grad_bias->placements() == Placements{Partial(), Replicate()});
    REQUIRE(g.grad_input->placements() == Placements{Shard(2), Replicate()});
    // Only the masked gradients are computed.
    auto only_w = convolution_backward(y, x, w, p, {false, true, false});
    REQUIRE_FALSE(only_w.grad_input.has_value());
    REQUIRE(only_w.grad_weight.has_value());
    REQUIRE_FALSE(only_w.grad_bias.has_value());
    REQUIRE(max_abs_diff(only_w.grad_weight->full_tensor(), g.grad_weight->full_tensor()) == 0.0);
  });
}

TEST_CASE("conv errors are raised on every rank and name the parameter P=3", "[conv][errors][mp]") {
  run_ranks(3, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    auto x = distribute_tensor(Tensor::rand({2, 4, 10}, DType::F32, 1), mesh, {Shard(2)});
    auto w = distribute_tensor(Tensor::rand({4, 4, 3}, DType::F32, 2), mesh, {Replicate()});
    auto w64 = distribute_tensor(Tensor::rand({4, 4, 3}, DType::F64, 2), mesh, {Replicate()});
    auto wbad = distribute_tensor(Tensor::rand({4, 3, 3}, DType::F32, 2), mesh, {Replicate()});
    auto msg = [](auto fn) {
      try {
        fn();
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    REQUIRE_THAT(msg([&] {
                   convolution(x, w, std::nullopt, {{0}, {{0, 0}}, {1}, 1});
                 }),
                 Catch::Contains("stride"));
    REQUIRE_THAT(msg([&] {
                   convolution(x, w, std::nullopt, {{1}, {{-1, 0}}, {1}, 1});
                 }),
                 Catch::Contains("padding"));
    REQUIRE_THAT(msg([&] {
                   convolution(x, w, std::nullopt, {{1}, {{0, 0}}, {0}, 1});
                 }),
                 Catch::Contains("dilation"));
    REQUIRE_THAT(msg([&] {
                   convolution(x, w, std::nullopt, {{1}, {{0, 0}}, {1}, 3});
                 }),
                 Catch::Contains("groups"));
    REQUIRE_THAT(msg([&] { convolution(x, wbad, std::nullopt, {}); }), Catch::Contains("weight"));
    REQUIRE_THAT(msg([&] { convolution(x, w64, std::nullopt, {}); }), Catch::Contains("weight"));
    REQUIRE_THAT(msg([&] {
                   convolution(x, w, std::nullopt, {{1}, {{0, 0}}, {6}, 1});
                 }),
                 Catch::Contains("output"));
  });
}

TEST_CASE("conv with a Partial input: forward Partial with the bias once, backward gradients P=2",
          "[conv][strategy][mp]") {
  run_ranks(2, [](RankContext&) { check_conv_case(base_case({2}, {Partial()})); });
}

TEST_CASE(
    "conv backward with partial masks: input only skips the window exchange, bias only, "
    "against the f64 oracle, 2x2 mesh H and W sharded",
    "[conv][strategy][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const ConvParams p{{1, 2}, {{1, 2}, {2, 0}}, {2, 1}, 1};
    const Tensor X = Tensor::rand({2, 3, 13, 11}, DType::F64, 1);
    const Tensor W = Tensor::rand({4, 3, 3, 2}, DType::F64, 2);
    auto x = distribute_tensor(X, mesh, {Shard(2), Shard(3)});
    auto w = distribute_tensor(W, mesh, {Replicate(), Replicate()});
    auto y = convolution(x, w, std::nullopt, p);
    const Tensor GY = Tensor::rand(y.shape(), DType::F64, 3);
    auto gy = distribute_tensor(GY, mesh, y.placements());
    auto only_input = convolution_backward(gy, x, w, p, {true, false, false});
    REQUIRE(only_input.grad_input.has_value());
    REQUIRE_FALSE(only_input.grad_weight.has_value());
    CHECK(max_abs_diff(only_input.grad_input->full_tensor(),
                       reference::ref_conv_grad_input(GY, W, X.shape(), p)) < 1e-10);
    auto only_bias = convolution_backward(gy, x, w, p, {false, false, true});
    REQUIRE(only_bias.grad_bias.has_value());
    CHECK(max_abs_diff(
              only_bias.grad_bias->redistribute(mesh, {Replicate(), Replicate()}).full_tensor(),
              reference::ref_conv_grad_bias(GY)) < 1e-10);
  });
}
