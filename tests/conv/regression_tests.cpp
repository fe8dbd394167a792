// One named regression test for each defect of the reference _tp_conv.py
// (docs/design.md §2). Each would fail if the defect came back.
#include <catch2/catch.hpp>
#include <set>
#include <tuple>

#include "dtensor/ops/dispatch.h"
#include "tests/conv/conv_case.h"
#include "tests/support/multiprocess.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::reference;

namespace {
ConvCase case_2d(Shape input, Shape kernel, ConvParams p, Shape mesh, Placements in) {
  ConvCase c;
  c.input = std::move(input);
  c.out_channels = 3;
  c.kernel = std::move(kernel);
  c.params = std::move(p);
  c.mesh = std::move(mesh);
  c.input_placements = std::move(in);
  c.seed = 11;
  return c;
}
ConvParams same_pad(std::int64_t k) {
  return ConvParams{
      {1, 1}, {{(k - 1) / 2, k - 1 - (k - 1) / 2}, {(k - 1) / 2, k - 1 - (k - 1) / 2}}, {1, 1}, 1};
}
}  // namespace

TEST_CASE("regression defect 1: the halo backward returns the input gradient P=2",
          "[conv][regression][mp]") {
  run_ranks(2, [](RankContext&) {
    auto e = check_conv_case(case_2d({2, 3, 6, 10}, {3, 3}, same_pad(3), {2}, {Shard(3)}));
    REQUIRE(e.grad_input < 1e-10);
  });
}

TEST_CASE("regression defect 2: neighbours come from the mesh-dim group, H and W on a 2x2 mesh",
          "[conv][regression][mp]") {
  run_ranks(4, [](RankContext&) {
    // W sharded on mesh dim 1: neighbours are global ranks r^1, not r+-1.
    check_conv_case(case_2d({2, 3, 7, 9}, {3, 3}, same_pad(3), {2, 2}, {Replicate(), Shard(3)}));
    // H sharded on mesh dim 0: neighbours are r+-2.
    check_conv_case(case_2d({2, 3, 9, 7}, {3, 3}, same_pad(3), {2, 2}, {Shard(2), Replicate()}));
    check_conv_case(case_2d({1, 3, 9, 9}, {5, 3}, same_pad(5), {2, 2}, {Shard(2), Shard(3)}));
  });
}

TEST_CASE("regression defect 3: no wrap-around, edges are zero padding, halo bytes exactly P=3",
          "[conv][regression][mp]") {
  RunOptions o;
  o.env.emplace("DTENSOR_CHECK_AGREEMENT", "0");  // count the halo traffic alone
  run_ranks(
      3,
      [](RankContext& ctx) {
        DeviceMesh mesh(DeviceType::CPU, {3});
        const Shape in{2, 3, 5, 12};
        const ConvParams p = same_pad(3);
        auto x = distribute_tensor(Tensor::rand(in, DType::F32, 1), mesh, {Shard(3)});
        auto w = distribute_tensor(Tensor::rand({4, 3, 3, 3}, DType::F32, 2), mesh, {Replicate()});
        // Independent count: positions this rank owns that another rank's
        // outputs read (stride 1, 3 taps, padding 1, 12 columns over 3 ranks).
        const std::int64_t L = 12, c = 4, i0 = ctx.rank * c, i1 = i0 + c;
        std::int64_t cols = 0;
        for (int q = 0; q < 3; ++q) {
          if (q == ctx.rank) continue;
          std::set<std::int64_t> need;
          for (std::int64_t j = q * c; j < (q + 1) * c; ++j)
            for (std::int64_t t = 0; t < 3; ++t)
              if (j - 1 + t >= i0 && j - 1 + t < i1 && j - 1 + t >= 0 && j - 1 + t < L)
                need.insert(j - 1 + t);
          cols += static_cast<std::int64_t>(need.size());
        }
        const auto before = ctx.pg->counters().bytes_sent.load();
        auto y = convolution(x, w, std::nullopt, p);
        const auto sent = ctx.pg->counters().bytes_sent.load() - before;
        REQUIRE(sent == static_cast<std::uint64_t>(cols * 2 * 3 * 5 * 4));
        // Edge ranks exchange one column with one neighbour, never with each other.
        REQUIRE(cols == (ctx.rank == 1 ? 2 : 1));
      },
      o);
}

TEST_CASE("regression defect 3: one rank pads its right edge with zeros, not its left columns P=1",
          "[conv][regression][mp]") {
  run_ranks(1, [](RankContext&) {
    check_conv_case(case_2d({1, 2, 4, 12}, {3, 3}, same_pad(3), {1}, {Shard(3)}));
  });
}

TEST_CASE("regression defect 4: even kernels, asymmetric and one-sided padding P=3",
          "[conv][regression][mp]") {
  run_ranks(3, [](RankContext&) {
    for (auto [k, pl, pr] : std::vector<std::tuple<int, int, int>>{
             {4, 0, 3}, {2, 1, 0}, {2, 0, 1}, {5, 0, 0}, {4, 2, 1}, {3, 2, 0}, {6, 4, 1}}) {
      ConvParams p{{1, 1}, {{0, 0}, {pl, pr}}, {1, 1}, 1};
      check_conv_case(case_2d({2, 2, 3, 13}, {1, k}, p, {3}, {Shard(3)}));
    }
  });
}

TEST_CASE("regression defect 5: shards narrower than the halo (multi-hop) and collective errors",
          "[conv][regression][mp]") {
  run_ranks(5, [](RankContext&) {
    // 6 columns over 5 ranks (2,2,2,0,0) with a 7-tap kernel: 3-column halos cross ranks.
    check_conv_case(case_2d({1, 2, 3, 6}, {1, 7}, ConvParams{{1, 1}, {{0, 0}, {3, 3}}, {1, 1}, 1},
                            {5}, {Shard(3)}));
    // Dilation 3 on 9 columns: windows span several ranks.
    check_conv_case(case_2d({1, 2, 2, 9}, {1, 3}, ConvParams{{1, 1}, {{0, 0}, {2, 4}}, {1, 3}, 1},
                            {5}, {Shard(3)}));
    // An impossible geometry: every rank raises the same error, none hangs.
    DeviceMesh mesh(DeviceType::CPU, {5});
    auto x = distribute_tensor(Tensor::rand({1, 2, 3, 4}, DType::F32, 1), mesh, {Shard(3)});
    auto w = distribute_tensor(Tensor::rand({2, 2, 1, 7}, DType::F32, 2), mesh, {Replicate()});
    REQUIRE_THROWS_AS(convolution(x, w, std::nullopt, {}), InvalidArgument);
  });
}

TEST_CASE("regression defect 6: a replicated input gives replicated, not Partial, weight gradients",
          "[conv][regression][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const ConvParams p = same_pad(3);
    const Tensor X = Tensor::rand({2, 3, 6, 6}, DType::F64, 1);
    const Tensor W = Tensor::rand({4, 3, 3, 3}, DType::F64, 2);
    auto x = distribute_tensor(X, mesh, {Replicate()});
    auto w = distribute_tensor(W, mesh, {Replicate()});
    auto y = convolution(x, w, std::nullopt, p);
    auto g = convolution_backward(y, x, w, p);
    REQUIRE(g.grad_weight->placements() == Placements{Replicate()});
    REQUIRE(g.grad_bias->placements() == Placements{Replicate()});
    const Tensor GW = ref_conv_grad_weight(y.full_tensor(), X, W.shape(), p);
    REQUIRE(max_abs_diff(g.grad_weight->to_local(), GW) < 1e-10);
    REQUIRE(max_abs_diff(g.grad_weight->full_tensor(), GW) < 1e-10);  // not P times
  });
}

TEST_CASE("regression defect 7: a Partial input with a bias adds the bias once P=3",
          "[conv][regression][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    const ConvParams p = same_pad(3);
    const Tensor X = Tensor::rand({1, 2, 5, 5}, DType::F64, 1);
    const Tensor W = Tensor::rand({3, 2, 3, 3}, DType::F64, 2);
    const Tensor B = Tensor::full({3}, 10.0, DType::F64);
    // Terms X/3 on each rank: the pending sum is X.
    Tensor part = X.clone();
    for (std::int64_t i = 0; i < part.numel(); ++i)
      part.data<double>()[i] /= 3.0;
    auto x = DTensor::from_local(part, mesh, {Partial()}, X.shape());
    auto w = distribute_tensor(W, mesh, {Replicate()});
    auto b = distribute_tensor(B, mesh, {Replicate()});
    auto y = convolution(x, w, b, p);
    REQUIRE(y.placements() == Placements{Partial()});
    REQUIRE(max_abs_diff(y.full_tensor(), ref_conv_forward(X, W, B, p)) < 1e-10);
    (void)ctx;
  });
}

TEST_CASE("regression defect 8: the handler runs on the inputs the propagator asked for",
          "[conv][regression][mp]") {
  run_ranks(4, [](RankContext&) {
    // Input S(1) with groups = 2: channel parallelism is not valid, so the
    // propagator must redistribute the input; the handler must use that.
    ConvCase c = case_2d({2, 4, 6, 6}, {3, 3}, same_pad(3), {4}, {Shard(1)});
    c.params.groups = 2;
    c.out_channels = 4;
    reset_dispatch_stats();
    check_conv_case(c);
    REQUIRE(dispatch_stats().inputs_redistributed > 0);
    // One spatial dim sharded on both mesh dims is not a halo layout: redistributed too.
    check_conv_case(case_2d({1, 2, 9, 8}, {3, 3}, same_pad(3), {2, 2}, {Shard(2), Shard(2)}));
  });
}
