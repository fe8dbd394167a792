// What halo_chain refuses to fuse, and why, on every rank; and its cost
// model's choices (dtensor/ops/halo_chain.h).
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

TEST_CASE("halo_chain refuses what it cannot fuse, naming why, on every rank, and its cost model",
          "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    const Placements R{Replicate()};
    const DTensor x =
        distribute_tensor(Tensor::rand({1, 2, 8, 8}, DType::F64, 1), mesh, {Shard(2)});
    const DTensor w = distribute_tensor(Tensor::rand({2, 2, 3, 3}, DType::F64, 2), mesh, R);
    ConvParams same;
    same.padding = {{1, 1}};
    ConvParams strided = same;
    strided.stride = {2};
    ChainConv a{w, std::nullopt, same}, s{w, std::nullopt, strided};
    CHECK_FALSE(halo_chain_refusal(x, {a, a}));
    CHECK(halo_chain_refusal(x, {a}).value_or("").find("fewer than two") != std::string::npos);
    // Strides and padding that is not "same" resample the chain: fused, with
    // zero padding only; a norm's statistics need every cell computed.
    CHECK_FALSE(halo_chain_refusal(x, {a, s}));
    ConvParams valid;
    valid.padding = {{0, 0}};
    CHECK_FALSE(halo_chain_refusal(x, {a, ChainConv{w, std::nullopt, valid}, a}));
    {
      ConvParams reflected = strided;
      reflected.padding_mode = PaddingMode::Reflect;
      CHECK(halo_chain_refusal(x, {a, ChainConv{w, std::nullopt, reflected}})
                .value_or("")
                .find("pads with zeros only") != std::string::npos);
      ConvParams sampling;  // k = 1, stride 2: every other row is read by none
      sampling.stride = {2};
      const DTensor w1x1 = distribute_tensor(Tensor::rand({2, 2, 1, 1}, DType::F64, 2), mesh, R);
      const ChainConv subsample{w1x1, std::nullopt, sampling};
      CHECK_FALSE(halo_chain_refusal(x, {a, subsample}));
      ConvParams padded = sampling;  // a 1x1 window padded by 1: outputs of padding only
      padded.stride = {1};
      padded.padding = {{1, 0}};
      CHECK(halo_chain_refusal(x, {a, ChainConv{w1x1, std::nullopt, padded}})
                .value_or("")
                .find("as wide as its window") != std::string::npos);
      CHECK(halo_chain_refusal(x, {a, ChainGroupNorm{}, subsample})
                .value_or("")
                .find("reads none of") != std::string::npos);
      CHECK_FALSE(halo_chain_refusal(x, {a, subsample, ChainGroupNorm{}, a}));
      ConvParams huge;  // a 3x3 window over 8 rows, stride 8: one output, then none
      huge.stride = {8};
      CHECK(halo_chain_refusal(x,
                               {ChainConv{w, std::nullopt, huge}, ChainConv{w, std::nullopt, huge}})
                .value_or("")
                .find("output is empty") != std::string::npos);
    }
    CHECK(halo_chain_refusal(distribute_tensor(x.full_tensor(), mesh, R), {a, a})
              .value_or("")
              .find("no spatial dim") != std::string::npos);
    // The input's rules alone: the same reason, whatever the layers.
    CHECK(halo_chain_input_refusal(distribute_tensor(x.full_tensor(), mesh, R))
              .value_or("")
              .find("no spatial dim") != std::string::npos);
    CHECK_FALSE(halo_chain_input_refusal(x));
    // Padding modes: reflect, replicate and a ring fuse; circular mixed with
    // another mode does not, nor a ring whose halo wraps twice, nor a
    // lopsided reflect whose rows the edge rank does not hold.
    auto moded = [&](const DTensor& weight, ConvParams p, PaddingMode m) {
      p.padding_mode = m;
      return ChainConv{weight, std::nullopt, p};
    };
    const ChainConv reflect = moded(w, same, PaddingMode::Reflect),
                    circular = moded(w, same, PaddingMode::Circular);
    CHECK_FALSE(halo_chain_refusal(x, {reflect, moded(w, same, PaddingMode::Replicate), a}));
    CHECK_FALSE(halo_chain_refusal(x, {circular, circular}));
    CHECK(halo_chain_refusal(x, {circular, a}).value_or("").find("mixes circular") !=
          std::string::npos);
    CHECK_FALSE(halo_chain_refusal(x, {a, ChainActivation{"silu"}, a}));
    CHECK(halo_chain_refusal(x, {a, ChainActivation{"softplus"}, a})
              .value_or("")
              .find("activation is not") != std::string::npos);
    // Pools: stride 1 and "same" only, PyTorch's rules, never in a ring; a
    // convolution and a pool are two window layers.
    auto pool = [](bool average, std::vector<std::int64_t> kernel, ConvParams::Padding padding,
                   std::vector<std::int64_t> stride = {1}) {
      ChainPool out{average, {}};
      out.params.kernel = std::move(kernel);
      out.params.padding = std::move(padding);
      out.params.stride = std::move(stride);
      return out;
    };
    const ChainPool max3 = pool(false, {3}, {{1, 1}});
    CHECK_FALSE(halo_chain_refusal(x, {a, max3}));
    CHECK_FALSE(halo_chain_refusal(x, {a, ChainActivation{"relu"}, pool(true, {2}, {{1, 0}}), a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, pool(false, {2}, {{0, 0}}, {2}), a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, pool(false, {3}, {{0, 0}})}));
    ChainPool ceil = pool(false, {2}, {{0, 0}}, {2});
    ceil.params.ceil_mode = true;
    CHECK(halo_chain_refusal(x, {a, ceil}).value_or("").find("ceil_mode") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, pool(true, {3}, {{2, 0}})})
              .value_or("")
              .find("pool's parameters") != std::string::npos);
    CHECK(
        halo_chain_refusal(x, {circular, max3}).value_or("").find("pool in a chain of circular") !=
        std::string::npos);
    CHECK(halo_chain_refusal(x, {max3, a}).value_or("").find("start with a convolution") !=
          std::string::npos);
    // Upsamples: nearest, or linear without align_corners, by whole
    // factors whose taps their footprint holds; never with a stride.
    auto upsampled = [](UpsampleMode mode, std::vector<double> scale,
                        std::vector<std::int64_t> size, bool align_corners = false) {
      ChainUpsample u;
      u.params.mode = mode;
      u.params.scale_factor = std::move(scale);
      u.params.size = std::move(size);
      u.params.align_corners = align_corners;
      return u;
    };
    const ChainUpsample twice = upsampled(UpsampleMode::Nearest, {2.0}, {});
    CHECK_FALSE(halo_chain_refusal(x, {a, twice, a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Linear, {}, {24, 8}), a}));
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Linear, {2.0}, {}, true), a})
              .value_or("")
              .find("aligns corners") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Nearest, {2.5}, {}), a})
              .value_or("")
              .find("no whole multiple") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Nearest, {2.0000001}, {}), a})
              .value_or("")
              .find("as no whole factor does") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, upsampled(UpsampleMode::Nearest, {}, {8, 8, 8}), a})
              .value_or("")
              .find("size or scale_factor") != std::string::npos);
    ConvParams halving = same;
    halving.stride = {2};
    CHECK(halo_chain_refusal(x, {ChainConv{w, std::nullopt, halving}, twice, a})
              .value_or("")
              .find("upsample has a strided layer") != std::string::npos);
    CHECK(halo_chain_refusal(x, {reflect, twice, a}).value_or("").find("pads with zeros only") !=
          std::string::npos);
    CHECK(halo_chain_refusal(x, {twice, a}).value_or("").find("start with a convolution") !=
          std::string::npos);
    CHECK(halo_chain_saving(x, {a, max3}) > 0);
    CHECK(halo_chain_saving(x, {a, twice, a}) > 0);
    // Transposed convolutions: at least as wide as their stride, with
    // output_padding at most their padding.
    auto transposed = [&](std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                          std::int64_t output_padding) {
      ConvTransposeParams p;
      p.stride = {stride};
      p.padding = {padding};
      p.output_padding = {output_padding};
      return ChainConvTranspose{
          distribute_tensor(Tensor::rand({2, 2, kernel, kernel}, DType::F64, 6), mesh, R),
          std::nullopt, p};
    };
    CHECK_FALSE(halo_chain_refusal(x, {a, transposed(3, 2, 1, 1), a}));
    CHECK_FALSE(halo_chain_refusal(x, {a, transposed(2, 2, 0, 0), a}));
    CHECK(halo_chain_refusal(x, {a, transposed(1, 2, 0, 0), a})
              .value_or("")
              .find("narrower than its stride") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, transposed(3, 2, 0, 1), a})
              .value_or("")
              .find("output_padding exceeds its padding") != std::string::npos);
    CHECK(halo_chain_refusal(x, {a, transposed(3, 2, 1, 2), a})
              .value_or("")
              .find("does not fit its input") != std::string::npos);
    CHECK(halo_chain_saving(x, {a, transposed(3, 2, 1, 1), a}) > 0);
    // Batch norms: running statistics both or neither, given in eval mode,
    // [C] and replicated; in training more than one value per channel.
    const DTensor stat = distribute_tensor(Tensor::rand({2}, DType::F64, 5), mesh, R);
    const DTensor stat3 = distribute_tensor(Tensor::rand({3}, DType::F64, 5), mesh, R);
    auto refused_for = [&](const DTensor& in, const ChainBatchNorm& b) {
      return halo_chain_refusal(in, {a, b, a}).value_or("");
    };
    CHECK(refused_for(x, {}).empty());
    CHECK(refused_for(x, {stat, stat, stat, stat, false}).empty());
    CHECK(refused_for(x, {stat, std::nullopt}).find("go together") != std::string::npos);
    CHECK(refused_for(x, {std::nullopt, std::nullopt, stat, stat, false})
              .find("eval mode has no running") != std::string::npos);
    CHECK(refused_for(x, {stat3, stat3}).find("running statistics are not [C]") !=
          std::string::npos);
    CHECK(refused_for(x, {std::nullopt, std::nullopt, stat3}).find("weight, bias") !=
          std::string::npos);
    CHECK(refused_for(x, {stat, stat, stat, stat, true, 0.1, -1.0}).find("eps is negative") !=
          std::string::npos);
    const DTensor single =
        distribute_tensor(Tensor::rand({1, 2, 1, 1}, DType::F64, 1), mesh, {Shard(2)});
    CHECK(refused_for(single, {}).find("one value per channel") != std::string::npos);
    CHECK(refused_for(single, {stat, stat, std::nullopt, std::nullopt, false}).empty());
    const DTensor w7 = distribute_tensor(Tensor::rand({2, 2, 7, 7}, DType::F64, 4), mesh, R);
    ConvParams same7;
    same7.padding = {{3, 3}};
    const ChainConv circular7 = moded(w7, same7, PaddingMode::Circular);
    CHECK(halo_chain_refusal(x, {circular7, circular7, circular7})
              .value_or("")
              .find("more than once") != std::string::npos);
    const DTensor narrow =
        distribute_tensor(Tensor::rand({1, 2, 3, 8}, DType::F64, 1), mesh, {Shard(2)});
    ConvParams lopsided;  // reads rows 1..2 at the top edge; the top rank holds 2 and 1 more
    lopsided.padding = {{2, 0}, {1, 1}};
    CHECK(halo_chain_refusal(narrow, {a, moded(w, lopsided, PaddingMode::Reflect)})
              .value_or("")
              .find("edge rank does not hold") != std::string::npos);
    {
      // f32 convolutions would run in bf16, each on its own; f64 is never lowered.
      AutocastScope autocast;
      const DTensor x32 = distribute_tensor(x.full_tensor().to(DType::F32), mesh, {Shard(2)});
      const DTensor w32 = distribute_tensor(w.full_tensor().to(DType::F32), mesh, R);
      ChainConv a32{w32, std::nullopt, same};
      CHECK(halo_chain_refusal(x32, {a32, a32}).value_or("").find("autocast") != std::string::npos);
      CHECK_FALSE(halo_chain_refusal(x, {a, a}));
    }
    // The cost model: a small chain pays, more so over a slower link; 256
    // channels recompute more than the messages they save.
    const double saving = halo_chain_saving(x, {a, a});
    CHECK(saving > 0);
    // One exchange or none either way: nothing saved.
    CHECK(halo_chain_saving(x, {a}) <= 0);
    CHECK(halo_chain_saving(x, {ChainActivation{"relu"}}) <= 0);
    // A reflect chain also pays for its padded copies.
    CHECK(halo_chain_saving(x, {reflect, reflect}) < saving);
    // Cut in two, the dim gives each rank one neighbour; the ring wraps, so
    // its ranks have one on each side: twice the messages saved.
    CHECK(halo_chain_saving(x, {circular, circular}) > saving);
    {
      // A send and a receive saved forward and backward, each 500 us more.
      ScopedConfig slow([](Config& c) { c.sim_link = Config::SimLink{500, std::nullopt}; });
      CHECK(halo_chain_saving(x, {a, a}) == Approx(saving + 2 * 2 * 500e-6));
    }
    const DTensor wide =
        distribute_tensor(Tensor::zeros({1, 256, 8, 64}, DType::F64), mesh, {Shard(2)});
    const DTensor w256 = distribute_tensor(Tensor::zeros({256, 256, 3, 3}, DType::F64), mesh, R);
    ChainConv big{w256, std::nullopt, same};
    CHECK_FALSE(halo_chain_refusal(wide, {big, big}));
    CHECK(halo_chain_saving(wide, {big, big}) < 0);
    CHECK_FALSE(halo_chain_pays(wide, {big, big}));
    // The trainer's DoubleConv blocks (3x3, f32; norms cost nothing here)
    // through shared memory, as docs/halo.md prices them: an exchange's own
    // cost saved pays for the encoders' recomputed row at both sizes and for
    // the decoder's (32 channels in) at 2x8x128x128, not at 2x8x256x256.
    {
      const auto weight = [&](std::int64_t out, std::int64_t in) {
        return ChainConv{distribute_tensor(Tensor::zeros({out, in, 3, 3}, DType::F32), mesh, R),
                         std::nullopt, same};
      };
      const auto input = [&](std::int64_t c, std::int64_t hw) {
        return distribute_tensor(Tensor::zeros({2, c, hw, hw}, DType::F32), mesh, {Shard(2)});
      };
      const std::vector<ChainLayer> encoder{weight(16, 8), weight(16, 16)};
      const std::vector<ChainLayer> decoder{weight(16, 32), weight(16, 16)};
      CHECK(halo_chain_saving(input(8, 128), encoder) > 0);
      CHECK(halo_chain_saving(input(8, 256), encoder) > 0);
      CHECK(halo_chain_saving(input(32, 128), decoder) > 0);
      // Over TCP (a message 40 us) the decoder fuses at 256^2 too.
      if (mesh.get_mesh_group()->message_seconds() <= 5e-6)
        CHECK(halo_chain_saving(input(32, 256), decoder) < 0);
    }
    // Every rank prices a chain alike, uneven shards too (9 rows: 5 and
    // 4), so that all fuse or none does: the cost is the largest shard's.
    {
      const DTensor uneven =
          distribute_tensor(Tensor::rand({1, 2, 9, 8}, DType::F64, 4), mesh, {Shard(2)});
      Tensor mine = Tensor::full({1}, halo_chain_saving(uneven, {reflect, reflect}), DType::F64);
      Tensor low = mine.clone(), high = mine.clone();
      const auto group = mesh.get_mesh_group();
      group->allreduce(low, ReduceOp::Min);
      group->allreduce(high, ReduceOp::Max);
      CHECK(low.data<double>()[0] == high.data<double>()[0]);
    }
    // Called directly, a call whose lists do not fit is refused by name.
    const DTensor w1 = distribute_tensor(Tensor::rand({2, 2, 3}, DType::F64, 3), mesh, R);
    CHECK_THROWS_WITH(dispatch("halo_chain", {x, std::string("conv"), w1, None{}, IntList{1, 1},
                                              IntList{1}, std::int64_t{1}, IntList{1}}),
                      Catch::Contains("halo_chain") && Catch::Contains("spatial dims"));
    // A layer of another kind, a field of the wrong type, a layer cut short:
    // each is named.
    CHECK_THROWS_WITH(
        dispatch("halo_chain", {x, std::string("pool"), w, None{}, IntList{1, 1, 1, 1},
                                IntList{1, 1}, std::int64_t{1}}),
        Catch::Contains("halo_chain") && Catch::Contains("unknown layer kind 'pool'"));
    CHECK_THROWS_WITH(
        dispatch("halo_chain",
                 {x, std::string("conv"), w, None{}, IntList{1, 1, 1, 1}, IntList{1, 1}, 1.5}),
        Catch::Contains("a convolution's groups") && Catch::Contains("must be an int"));
    CHECK_THROWS_WITH(dispatch("halo_chain", {x, std::string("conv"), w, None{}}),
                      Catch::Contains("a convolution's padding") && Catch::Contains("missing"));
    ConvParams reflected = strided;
    reflected.padding_mode = PaddingMode::Reflect;
    CHECK_THROWS_WITH(halo_chain(x, {a, ChainConv{w, std::nullopt, reflected}}),
                      Catch::Contains("halo_chain") && Catch::Contains("zeros only"));
    // Running statistics updated in training come back from
    // halo_chain_updating only; halo_chain() would drop them.
    const ChainBatchNorm updating{stat, stat};
    CHECK_THROWS_WITH(halo_chain(x, {a, updating, a}),
                      Catch::Contains("layer 1") && Catch::Contains("halo_chain_updating"));
    CHECK(halo_chain_updating(x, {a, updating, a}).running_stats.size() == 1);
    CHECK_NOTHROW(halo_chain(x, {a, ChainBatchNorm{}, a}));
  });
}
