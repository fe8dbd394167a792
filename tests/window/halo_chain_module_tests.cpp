// nn::Sequential, nn::HaloRegion and the trainer's kind of chain run as one
// exchange exactly where the cost model and DTENSOR_HALO_FUSION say so, with
// the results of the layers run one by one; which runs fuse is remembered
// per input layout and link, and logged once (dtensor/nn/halo_region.h).
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

TEST_CASE(
    "nn::Sequential runs a conv / group norm / relu chain as one exchange where it pays, and "
    "layer by layer with DTENSOR_HALO_FUSION=off, with the same result",
    "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    nn::manual_seed(3);
    nn::ConvOptions o;
    o.padding = {1};
    o.dtype = DType::F64;
    auto seq = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o),
        std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(4, 4, 3, o),
        std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
        std::make_shared<nn::ReLU>()});
    seq->distribute(mesh);
    const Tensor input = Tensor::rand({2, 2, 16, 16}, DType::F64, 4);
    // One forward and backward of `net` on `input` sharded as `placement`:
    // the output, the input's gradient, every parameter's.
    auto step = [&](nn::Module& net, const Placement& placement, std::uint64_t seed) {
      for (auto& p : net.parameters())
        p->set_grad(std::nullopt);
      DTensor x = distribute_tensor(input, mesh, {placement});
      x.requires_grad_();
      const DTensor y = net(x);
      backward(y,
               distribute_tensor(Tensor::rand(y.shape(), DType::F64, seed), mesh, y.placements()));
      std::vector<Tensor> out{y.full_tensor(), x.grad()->full_tensor()};
      for (auto& p : net.parameters())
        out.push_back(p->grad()->full_tensor());
      return out;
    };
    std::vector<Tensor> fused, unfused;
    {
      ChainCounter counter;
      fused = step(*seq, Shard(2), 5);
      CHECK(counter.count == 1);
    }
    {
      ScopedConfig off([](Config& c) { c.halo_fusion = false; });
      ChainCounter counter;
      unfused = step(*seq, Shard(2), 5);
      CHECK(counter.count == 0);
    }
    for (std::size_t i = 0; i < fused.size(); ++i)
      CHECK(max_relative_error(fused[i], unfused[i]) <= 1e-12);
    // `net` with fusion on (`chains` chains run) and off (none): equal.
    auto fused_equals_unfused = [&](nn::Module& net, const Placement& placement, std::uint64_t seed,
                                    int chains) {
      std::vector<Tensor> runs[2];
      for (const bool fuse : {true, false}) {
        ScopedConfig knob([fuse](Config& c) { c.halo_fusion = fuse; });
        ChainCounter counter;
        runs[fuse ? 0 : 1] = step(net, placement, seed);
        CHECK(counter.count == (fuse ? chains : 0));
      }
      for (std::size_t i = 0; i < runs[0].size(); ++i)
        CHECK(max_relative_error(runs[0][i], runs[1][i]) <= 1e-12);
    };
    // InstanceNorm is a group norm with a group per channel.
    auto inorm = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 3, 3, o),
        std::make_shared<nn::InstanceNorm>(3, 1e-5, true, DType::F64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(3, 2, 3, o),
        std::make_shared<nn::InstanceNorm>(2, 1e-5, false, DType::F64)});
    inorm->distribute(mesh);
    fused_equals_unfused(*inorm, Shard(3), 6, 1);
    // Padding modes: reflect then replicate, and a circular ring.
    for (const auto& [first, second] : {std::pair{PaddingMode::Reflect, PaddingMode::Replicate},
                                        std::pair{PaddingMode::Circular, PaddingMode::Circular}}) {
      nn::ConvOptions a = o, b = o;
      a.padding_mode = first;
      b.padding_mode = second;
      auto moded = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, a),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 2, 3, b)});
      moded->distribute(mesh);
      fused_equals_unfused(*moded, Shard(2), 7, 1);
    }
    // Activations join as layers of their own.
    auto activated = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::SiLU>(),
        std::make_shared<nn::Conv2d>(4, 4, 3, o),
        std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
        std::make_shared<nn::GELU>(GeluApproximate::Tanh), std::make_shared<nn::Conv2d>(4, 2, 3, o),
        std::make_shared<nn::LeakyReLU>(0.2), std::make_shared<nn::Tanh>()});
    activated->distribute(mesh);
    fused_equals_unfused(*activated, Shard(2), 9, 1);
    // A Pad before a Conv that pads nothing joins the chain as that
    // convolution padded in the Pad's mode; unfused, the pad operator runs
    // and then a "valid" convolution. A constant padding of 1 joins nothing.
    nn::ConvOptions valid = o;
    valid.padding = {0};
    for (const auto& [mode, value, chains] :
         {std::tuple{PadMode::Reflect, 0.0, 1}, std::tuple{PadMode::Constant, 0.0, 1},
          std::tuple{PadMode::Constant, 1.0, 0}}) {
      auto padded = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Pad>(ConvParams::Padding{{1, 1}}, mode, value),
          std::make_shared<nn::Conv2d>(2, 4, 3, valid),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Pad>(ConvParams::Padding{{1, 1}, {2, 0}}, PadMode::Replicate),
          std::make_shared<nn::Conv2d>(4, 2, 3, valid)});
      padded->distribute(mesh);
      fused_equals_unfused(*padded, Shard(2), 8, chains);
    }
    // Pools join the chain, "same" ones and one that halves (the chain then
    // resamples).
    for (const bool halving : {false, true}) {
      PoolParams pooling;
      pooling.kernel = {halving ? 2 : 3};
      pooling.stride = {halving ? 2 : 1};
      pooling.padding = {{halving ? 0 : 1, halving ? 0 : 1}};
      auto pooled = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::MaxPool>(pooling),
          std::make_shared<nn::AvgPool>(PoolParams{{3}, {1}, {{1, 1}}}),
          std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      pooled->distribute(mesh);
      fused_equals_unfused(*pooled, Shard(2), 10, 1);
    }
    // An Upsample after a Conv joins the chain (a decoder's block: the
    // convolutions before and after it share one exchange), nearest by a
    // scale factor and linear by a size; one after a strided Conv does not
    // (strides and upsamples read as no one window): the run is cut before
    // it, and the Conv after it starts the second chain.
    for (const bool linear : {false, true}) {
      UpsampleParams up;
      up.mode = linear ? UpsampleMode::Linear : UpsampleMode::Nearest;
      if (linear)
        up.size = {32, 48};
      else
        up.scale_factor = {2.0};
      auto decoder = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Upsample>(up),
          std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      decoder->distribute(mesh);
      fused_equals_unfused(*decoder, Shard(2), 18, 1);
      fused_equals_unfused(*decoder, Shard(3), 19, 1);
    }
    // A ConvTranspose after a Conv joins it too: overlapping windows (k 3,
    // stride 2, padding 1, output_padding 1) and the U-Net's way up (k =
    // stride = 2, which exchanges nothing alone).
    for (const std::int64_t kernel : {3, 2}) {
      nn::ConvTransposeOptions t;
      t.stride = {2};
      t.padding = {kernel == 3 ? 1 : 0};
      t.output_padding = {kernel == 3 ? 1 : 0};
      t.dtype = DType::F64;
      auto decoder = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::ConvTranspose2d>(4, 3, kernel, t),
          std::make_shared<nn::Conv2d>(3, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      decoder->distribute(mesh);
      fused_equals_unfused(*decoder, Shard(2), 21, 1);
    }
    // An InstanceNorm after a ConvTranspose has a group per channel of the
    // transposed convolution's output (8 here, not the 4 of the Conv
    // before it, which would divide 8 and pass as a group norm).
    {
      nn::ConvTransposeOptions t;
      t.stride = {2};
      t.padding = {1};
      t.output_padding = {1};
      t.dtype = DType::F64;
      auto decoder = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::ConvTranspose2d>(4, 8, 3, t),
          std::make_shared<nn::InstanceNorm>(8, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(8, 2, 3, o)});
      decoder->distribute(mesh);
      fused_equals_unfused(*decoder, Shard(2), 22, 1);
    }
    {
      nn::ConvOptions halving = o;
      halving.stride = {2};
      UpsampleParams up;
      up.scale_factor = {2.0};
      auto strided = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::Conv2d>(4, 4, 3, halving),
          std::make_shared<nn::Upsample>(up), std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      strided->distribute(mesh);
      fused_equals_unfused(*strided, Shard(2), 20, 2);
    }
    // A run that cannot fuse whole (a group norm before a 1x1 convolution of
    // stride 2, which reads every other row only) fuses up to that
    // convolution, and from there on again (that 1x1 convolution exchanges
    // nothing alone: two 3x3 after it make the second chain pay).
    {
      nn::ConvOptions subsample = o;
      subsample.padding = std::vector<std::int64_t>{0};
      subsample.stride = {2};
      auto cut = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::Conv2d>(4, 4, 1, subsample),
          std::make_shared<nn::Conv2d>(4, 4, 3, o), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      cut->distribute(mesh);
      fused_equals_unfused(*cut, Shard(2), 15, 2);
    }
    // A run refused whole fuses its longest part that is not, and the rest
    // as a run of its own: zero-padded convolutions then circular ones (a
    // circular chain must be circular throughout), and a strided run whose
    // group norm comes before a 1x1 convolution of stride 2 (cut right
    // before that convolution, not at the first layer that resamples).
    {
      nn::ConvOptions ring = o;
      ring.padding_mode = PaddingMode::Circular;
      auto mixed = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, o),
          std::make_shared<nn::Conv2d>(4, 4, 3, ring),
          std::make_shared<nn::Conv2d>(4, 2, 3, ring)});
      mixed->distribute(mesh);
      fused_equals_unfused(*mixed, Shard(2), 16, 2);
      nn::ConvOptions halving = o;
      halving.stride = {2};
      nn::ConvOptions subsample = o;
      subsample.padding = std::vector<std::int64_t>{0};
      subsample.stride = {2};
      auto strided = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::Conv2d>(4, 4, 3, halving),
          std::make_shared<nn::GroupNorm>(2, 4, 1e-5, true, DType::F64),
          std::make_shared<nn::Conv2d>(4, 4, 1, subsample),
          std::make_shared<nn::Conv2d>(4, 4, 3, o), std::make_shared<nn::Conv2d>(4, 2, 3, o)});
      strided->distribute(mesh);
      fused_equals_unfused(*strided, Shard(2), 17, 2);
    }
    // BatchNorms join the chain (a ReLU after one folds into it): two
    // networks alike, one fused, one not, trained two steps and then run in
    // eval mode; their outputs, gradients and buffers (the running
    // statistics, the batches counted) stay equal.
    {
      auto batch_normed = [&] {
        nn::manual_seed(11);
        auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(2, 4, 3, o),
            std::make_shared<nn::BatchNorm>(4, 1e-5, 0.3, true, true, DType::F64),
            std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 3, 3, o),
            std::make_shared<nn::BatchNorm>(3, 1e-5, 0.1, false, true, DType::F64),
            std::make_shared<nn::Conv2d>(3, 2, 3, o)});
        net->distribute(mesh);
        return net;
      };
      // The same BatchNorm twice: the second use updates from the first's
      // result, so the fused run ends before it.
      auto shared_twice = [&] {
        nn::manual_seed(13);
        auto bn = std::make_shared<nn::BatchNorm>(4, 1e-5, 0.5, true, true, DType::F64);
        auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(2, 4, 3, o), bn, std::make_shared<nn::Conv2d>(4, 4, 3, o),
            bn, std::make_shared<nn::Conv2d>(4, 4, 3, o)});
        net->distribute(mesh);
        return net;
      };
      {
        auto twice = std::array{shared_twice(), shared_twice()};
        std::vector<Tensor> runs[2];
        for (const bool fuse : {true, false}) {
          ScopedConfig knob([fuse](Config& c) { c.halo_fusion = fuse; });
          ChainCounter counter;
          runs[fuse ? 0 : 1] = step(*twice[fuse ? 0 : 1], Shard(2), 14);
          CHECK(counter.count == (fuse ? 1 : 0));  // conv bn conv, then bn and conv alone
          for (const auto& [name, t] : twice[fuse ? 0 : 1]->named_buffers())
            runs[fuse ? 0 : 1].push_back(t->full_tensor());
        }
        for (std::size_t i = 0; i < runs[0].size(); ++i) {
          INFO(fmt::format("a BatchNorm used twice, result {}", i));
          CHECK(max_relative_error(runs[0][i], runs[1][i]) <= 1e-12);
        }
      }
      auto nets = std::array{batch_normed(), batch_normed()};
      auto buffers = [](nn::Module& net) {
        std::vector<Tensor> out;
        for (const auto& [name, t] : net.named_buffers())
          out.push_back(t->full_tensor());
        return out;
      };
      for (const bool training : {true, true, false}) {
        std::vector<Tensor> runs[2];
        for (const bool fuse : {true, false}) {
          ScopedConfig knob([fuse](Config& c) { c.halo_fusion = fuse; });
          nn::Module& net = *nets[fuse ? 0 : 1];
          net.train(training);
          ChainCounter counter;
          runs[fuse ? 0 : 1] = step(net, Shard(2), 12);
          CHECK(counter.count == (fuse ? 1 : 0));
          for (const Tensor& b : buffers(net))
            runs[fuse ? 0 : 1].push_back(b);
        }
        REQUIRE(runs[0].size() == runs[1].size());
        CHECK(runs[0].size() == 2 + 8 + 6);  // output, input, 8 parameters, 2 x 3 buffers
        for (std::size_t i = 0; i < runs[0].size(); ++i) {
          INFO(fmt::format("training {}, result {}", training, i));
          CHECK(max_relative_error(runs[0][i], runs[1][i]) <= 1e-12);
        }
      }
    }
    // Replicated input: nothing to fuse, the layers run one by one.
    ChainCounter counter;
    const DTensor r = distribute_tensor(input, mesh, {Replicate()});
    (*seq)(r);
    CHECK(counter.count == 0);
  });
}

TEST_CASE(
    "nn::Sequential remembers which runs fuse per input layout and link: every call chooses as a "
    "fresh search would, and equals the layers one by one",
    "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    // Eight conv / group norm / relu blocks of 32 channels, f32: at the
    // default message cost the cost model fuses the first blocks only, the
    // fewer the wider the tile (recomputing its overlap costs more than the
    // messages saved), over a slow link all eight.
    auto blocks = [&] {
      nn::manual_seed(11);
      nn::ConvOptions o;
      o.padding = {1};
      std::vector<std::shared_ptr<nn::Module>> modules;
      for (int b = 0; b < 8; ++b) {
        modules.push_back(std::make_shared<nn::Conv2d>(b == 0 ? 2 : 32, 32, 3, o));
        modules.push_back(std::make_shared<nn::GroupNorm>(4, 32));
        modules.push_back(std::make_shared<nn::ReLU>());
      }
      auto seq = std::make_shared<nn::Sequential>(modules);
      seq->distribute(mesh);
      return seq;
    };
    const auto kept = blocks();
    struct Run {
      Tensor y;
      std::vector<std::size_t> chains;  // the arguments of each chain run
    };
    auto run = [&](nn::Module& net, const Tensor& input) {
      NoGradGuard no_grad;
      ChainCounter counter;
      const DTensor y = net(distribute_tensor(input, mesh, {Shard(2)}));
      return Run{y.full_tensor().to(DType::F64), counter.arguments};
    };
    const Tensor narrow = Tensor::rand({1, 2, 16, 128}, DType::F32, 5);
    const Tensor wide = Tensor::rand({1, 2, 16, 1024}, DType::F32, 6);
    const std::optional<Config::SimLink> loopback, slow = Config::SimLink{5000, std::nullopt};
    // Revisited layouts and links, in an order where a decision remembered
    // under the wrong key would be reused: a run remembered is checked again
    // before it fuses, so what a wrong key would show is a shorter run than
    // a fresh search finds (the wide tile's, on the narrow tile or over the
    // slow link).
    std::vector<std::vector<std::size_t>> chains;
    for (const auto& [input, link] :
         {std::pair{wide, loopback}, std::pair{narrow, loopback}, std::pair{wide, slow},
          std::pair{narrow, slow}, std::pair{narrow, loopback}, std::pair{wide, loopback}}) {
      ScopedConfig knob([link = link](Config& c) { c.sim_link = link; });
      const Run remembered = run(*kept, input);
      const Run fresh = run(*blocks(), input);  // new modules: nothing remembered
      INFO("link " << (link ? "slow" : "loopback") << ", width " << input.shape()[3]
                   << ", chains of " << fmt::format("{}", fmt::join(remembered.chains, ", "))
                   << " arguments");
      CHECK(remembered.chains == fresh.chains);
      CHECK(max_abs_diff(remembered.y, fresh.y) == 0.0);  // the same chains, the same sums
      Run unfused;
      {
        ScopedConfig off([](Config& c) { c.halo_fusion = false; });
        unfused = run(*kept, input);
      }
      CHECK(unfused.chains.empty());
      // Summed in other orders (three norms deep, ~1e-4 of the largest value).
      CHECK(max_relative_error(remembered.y, unfused.y) <= 1e-3);
      chains.push_back(remembered.chains);
    }
    // The layouts and links chose differently, so a key that left one out
    // would have been caught above.
    INFO(fmt::format("chains per call: {}", chains));
    CHECK(chains[0] != chains[1]);
    CHECK(chains[1] != chains[3]);
    CHECK(chains[2].size() == 1);
  });
}

TEST_CASE(
    "nn::Sequential's remembered runs follow train / eval, with batch norms' running statistics "
    "and Pad + Conv",
    "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    // Zero-padded blocks (a Pad before a Conv that pads nothing) with batch
    // norms, cut by the cost model into a chain and layers one by one.
    auto blocks = [&] {
      nn::manual_seed(12);
      nn::ConvOptions valid;
      valid.padding = {0};
      std::vector<std::shared_ptr<nn::Module>> modules;
      for (int b = 0; b < 6; ++b) {
        modules.push_back(std::make_shared<nn::Pad>(ConvParams::Padding{{1, 1}}));
        modules.push_back(std::make_shared<nn::Conv2d>(b == 0 ? 2 : 32, 32, 3, valid));
        modules.push_back(std::make_shared<nn::BatchNorm>(32));
        modules.push_back(std::make_shared<nn::ReLU>());
      }
      auto seq = std::make_shared<nn::Sequential>(modules);
      seq->distribute(mesh);
      return seq;
    };
    const Tensor input = Tensor::rand({2, 2, 16, 64}, DType::F32, 7);
    auto run = [&](nn::Module& net) {
      NoGradGuard no_grad;
      ChainCounter counter;
      const DTensor y = net(distribute_tensor(input, mesh, {Shard(2)}));
      std::vector<Tensor> out{y.full_tensor().to(DType::F64)};
      for (auto& [name, b] : net.named_buffers())
        if (name.find("running") != std::string::npos)
          out.push_back(b->full_tensor().to(DType::F64));
      return std::pair{out, counter.arguments};
    };
    // `kept` runs fused (remembering), `twin` the same modules one by one:
    // the same history of running statistics.
    const auto kept = blocks(), twin = blocks();
    auto step = [&](const char* what) {
      INFO(what);
      const auto [fused, chains] = run(*kept);
      // A fresh search: new modules, nothing remembered, the same mode.
      const auto fresh = blocks();
      fresh->train(kept->is_training());
      CHECK(run(*fresh).second == chains);
      decltype(run(*twin)) unfused;
      {
        ScopedConfig off([](Config& c) { c.halo_fusion = false; });
        unfused = run(*twin);
      }
      REQUIRE(fused.size() == unfused.first.size());
      for (std::size_t k = 0; k < fused.size(); ++k)
        CHECK(max_relative_error(fused[k], unfused.first[k]) <= 1e-3);
      return chains;
    };
    const auto trained = step("training: running statistics updated");
    CHECK(!trained.empty());
    CHECK(step("training, remembered") == trained);
    kept->eval();
    twin->eval();
    step("eval: running statistics read");
    step("eval, remembered");
    kept->train();
    twin->train();
    CHECK(step("training again") == trained);
  });
}

TEST_CASE("nn::Sequential logs each fusion decision once, at debug level, with the model's price",
          "[window][halo_chain][mp]") {
  run_ranks(2, [](RankContext&) {
    const auto mesh = init_device_mesh(DeviceType::CPU, {2});
    nn::manual_seed(5);
    nn::ConvOptions o;
    o.padding = {1};
    // A chain that pays on small tiles, and a convolution with a norm after
    // it: one window layer, nothing to fuse.
    auto chain = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::GroupNorm>(2, 4),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, o)});
    auto single = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(2, 4, 3, o), std::make_shared<nn::GroupNorm>(2, 4)});
    chain->distribute(mesh);
    single->distribute(mesh);
    const DTensor x =
        distribute_tensor(Tensor::rand({1, 2, 16, 16}, DType::F32, 6), mesh, {Shard(2)});
    std::ostringstream out;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    auto logger = log::logger();
    const auto level = logger->level();
    logger->sinks().push_back(sink);
    logger->set_level(spdlog::level::debug);
    for (int i = 0; i < 2; ++i) {  // the second forward finds the decisions remembered
      (void)(*chain)(x);
      (void)(*single)(x);
    }
    logger->set_level(level);
    logger->sinks().pop_back();
    const std::string text = out.str();
    INFO(text);
    const std::string fused =
        "halo fusion: modules 0-3 of 4 run as one exchange on DTensorSpec(f32, [1, 2, 16, 16]";
    const auto at = text.find(fused);
    REQUIRE(at != std::string::npos);
    CHECK(text.find(fused, at + 1) == std::string::npos);  // once
    CHECK_THAT(text, Catch::Contains("us a step)"));
    const std::string declined = "halo fusion: no run from module 0 of 2 fuses and pays on";
    const auto no = text.find(declined);
    REQUIRE(no != std::string::npos);
    CHECK(text.find(declined, no + 1) == std::string::npos);
  });
}
