// One halo exchange per chain (dtensor/ops/halo_chain.h), on real ranks: a
// random chain of "same" convolutions, group norms and batch norms (with and
// without relu, weights and biases; batch norms in training, with and
// without running statistics, and in eval mode), activations and stride-1
// max and average pools (every padding mode; in zero-padded chains a
// quarter of the convolutions and pools strided or padded otherwise than
// "same", or, in a third of them, upsamples and transposed convolutions
// between the convolutions) run fused equals the same
// layers run one by one, forward, every gradient (the input's and each
// parameter's) and the batch norms' updated running statistics, in f64 to
// 1e-12 relative. Random shapes of one to three
// spatial dims small enough that shards are uneven or empty and halos reach
// several ranks away, on 1-D meshes of 2 and 3 ranks and a 2x2 mesh with
// two spatial dims (or the batch and a spatial dim) sharded. Also: nn::Sequential fuses exactly
// where the cost model and DTENSOR_HALO_FUSION say so, and the trainer's kind of chain runs as one
// exchange (counted).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/logging.h"
#include "dtensor/nn/halo_region.h"
#include "dtensor/nn/layers.h"
#include "dtensor/ops/activations.h"
#include "dtensor/ops/autocast.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/halo_chain.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/window_ops.h"
#include "dtensor/placement/dtensor.h"
#include "tests/support/multiprocess.h"
#include "tests/support/scoped_config.h"
#include "tests/window/halo_chain_case.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::testing::chain;

TEST_CASE("halo_chain equals its layers one by one, forward and every gradient, P = 2 and 3",
          "[window][halo_chain][mp]") {
  for (int P : {2, 3})
    run_ranks(P, [P](RankContext&) {
      run_cases(init_device_mesh(DeviceType::CPU, {P}), 80, 11 + static_cast<std::uint64_t>(P));
    });
}

TEST_CASE("halo_chain in f32 (oneDNN's kernels, padded copies) equals its layers one by one",
          "[window][halo_chain][mp]") {
  // The two runs sum in different orders (the statistics over owned cells,
  // the kernels' blocking over other windows): up to ~1e-4 of the largest
  // value after three norms. A wrong row or fold is of the order of 1.
  run_ranks(2, [](RankContext&) {
    run_cases(init_device_mesh(DeviceType::CPU, {2}), 60, 21, DType::F32, 1e-3);
  });
}

TEST_CASE("halo_chain on a 2x2 mesh: two spatial dims, or batch and space, sharded",
          "[window][halo_chain][mp]") {
  run_ranks(4, [](RankContext&) { run_cases(init_device_mesh(DeviceType::CPU, {2, 2}), 80, 5); });
}

TEST_CASE(
    "halo_chain ending in a transposed convolution that changes the channels equals its layers",
    "[window][halo_chain][mp]") {
  // (The random chains put a convolution after every transposed one: the
  // chain's output then has the last convolution's channels either way.)
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    Case c;
    c.shape = {2, 2, 9, 6};
    c.placements = {Shard(2)};
    LayerSpec conv;
    conv.conv = true;
    conv.params.padding = {{1, 1}};
    conv.weight = Tensor::rand({4, 2, 3, 3}, DType::F64, 31);
    LayerSpec up;
    ConvTransposeParams p;
    p.stride = {2};
    p.padding = {1};
    p.output_padding = {1};
    p.groups = 2;
    up.transposed = p;
    up.weight = Tensor::rand({4, 3, 3, 3}, DType::F64, 32);  // 4 -> 6 channels
    up.bias = Tensor::rand({6}, DType::F64, 33);
    LayerSpec relu;
    relu.activation = ChainActivation{"relu"};
    c.layers = {conv, relu, up};
    const auto fused = run(c, mesh, true, 34, DType::F64);
    const auto unfused = run(c, mesh, false, 34, DType::F64);
    REQUIRE(fused.size() == unfused.size());
    REQUIRE(fused[0].shape() == Shape{2, 6, 18, 12});
    for (std::size_t i = 0; i < fused.size(); ++i)
      CHECK(max_relative_error(fused[i], unfused[i]) <= 1e-12);
  });
}
