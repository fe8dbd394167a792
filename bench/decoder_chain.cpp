// A decoder block trained one step at a time (forward and backward) on a
// mesh of the world size, its input sharded along H, with the halo chain
// on and off in alternate steps, side by side in one run: the median of
// each and their ratio, and the messages rank 0 sends per step. The block
// is what nn::Sequential fuses into one chain when the cost model says it
// pays: Conv 3x3, GroupNorm + ReLU, an upsample by 2 (nearest, linear, or a
// transposed convolution of kernel 3, stride 2), Conv 3x3, GroupNorm +
// ReLU, Conv 3x3. Where the model says no (a fast link, wide channels), both
// sides run the layers one by one; "fuses" says which.
//
//   dtensor-run -n 2 --bind-cores -- dtensor-bench-decoder --input 2,16,64,64 --up nearest
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "dtensor/dtensor.h"
#include "median.h"

using namespace dtensor;
using Clock = std::chrono::steady_clock;

namespace {

using dtensor::bench::median;

std::vector<std::shared_ptr<nn::Module>> decoder(std::int64_t channels, const std::string& up) {
  nn::ConvOptions same;
  same.padding = {1};
  auto norm = [&] {
    auto n = std::make_shared<nn::GroupNorm>(4, channels);
    n->fuse_activation(NormActivation::ReLU);
    return n;
  };
  std::shared_ptr<nn::Module> upsampling;
  if (up == "transposed") {
    nn::ConvTransposeOptions t;
    t.stride = {2};
    t.padding = {1};
    t.output_padding = {1};
    upsampling = std::make_shared<nn::ConvTranspose2d>(channels, channels, 3, t);
  } else {
    UpsampleParams p;
    p.mode = up == "linear" ? UpsampleMode::Linear : UpsampleMode::Nearest;
    p.scale_factor = {2.0};
    upsampling = std::make_shared<nn::Upsample>(p);
  }
  return {std::make_shared<nn::Conv2d>(channels, channels, 3, same),
          norm(),
          upsampling,
          std::make_shared<nn::Conv2d>(channels, channels, 3, same),
          norm(),
          std::make_shared<nn::Conv2d>(channels, channels, 3, same)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string input = "2,16,64,64", up = "nearest";
  std::int64_t iters = 9, warmup = 2;
  bool json = false;
  CLI::App app{"A decoder block with the halo chain on and off", "dtensor-bench-decoder"};
  app.add_option("--input", input, "N,C,H,W of the whole batch");
  app.add_option("--up", up, "the upsample: nearest, linear or transposed")
      ->check(CLI::IsMember({"nearest", "linear", "transposed"}));
  app.add_option("--iters", iters, "timed steps of each side");
  app.add_option("--warmup", warmup, "untimed steps of each side first");
  app.add_flag("--json", json, "one JSON line");
  CLI11_PARSE(app, argc, argv);
  const Shape shape = parse_int_list(input, "--input");

  init_process_group();
  const DeviceMesh mesh(DeviceType::CPU, {get_world_size()});
  nn::manual_seed(1);
  const auto modules = decoder(shape[1], up);
  nn::Sequential block(modules);
  block.distribute(mesh);
  DTensor x = distribute_tensor(Tensor::rand(shape, DType::F32, 2), mesh, {Shard(2)});
  x.requires_grad_();
  // The output's gradient, fixed (the output is placed alike either way).
  const DTensor y0 = block(x);
  const DTensor gy =
      distribute_tensor(Tensor::rand(y0.shape(), DType::F32, 3), mesh, y0.placements());
  const Config environment = config();
  auto counted = [&] {
    return world()->counters().messages_sent.load() +
           (mesh.get_group(0) != world() ? mesh.get_group(0)->counters().messages_sent.load() : 0);
  };
  std::vector<double> times[2];
  double messages[2] = {0, 0};
  for (std::int64_t i = 0; i < 2 * (warmup + iters); ++i) {
    const bool fused = i % 2 == 0;
    Config c = environment;
    c.halo_fusion = fused;
    set_config(c);
    world()->barrier();
    const auto sent = counted();
    const auto t0 = Clock::now();
    const DTensor y = block(x);
    backward(y, gy);
    world()->barrier();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i < 2 * warmup) continue;
    times[fused ? 0 : 1].push_back(ms);
    messages[fused ? 0 : 1] += static_cast<double>(counted() - sent) / static_cast<double>(iters);
  }
  set_config(environment);
  // The chain exchanges once each way where the layers would each.
  const bool fuses = messages[0] < messages[1];
  // The cost model's estimate of what fusing saves a step.
  std::vector<ChainLayer> layers;
  for (const auto& m : modules) {
    if (auto* conv = dynamic_cast<nn::Conv*>(m.get())) layers.emplace_back(conv->chain_layer());
    if (auto* norm = dynamic_cast<nn::GroupNorm*>(m.get()))
      layers.emplace_back(norm->chain_layer());
    if (auto* u = dynamic_cast<nn::Upsample*>(m.get())) layers.emplace_back(u->chain_layer());
    if (auto* t = dynamic_cast<nn::ConvTranspose*>(m.get())) layers.emplace_back(t->chain_layer());
  }
  const double saving_ms = halo_chain_saving(x, layers) * 1e3;
  if (get_rank() == 0) {
    const double fused = median(times[0]), unfused = median(times[1]);
    if (json)
      std::printf(
          "{\"P\": %d, \"input\": \"%s\", \"up\": \"%s\", \"fuses\": %s, \"fused_ms\": %.3f, "
          "\"unfused_ms\": %.3f, \"unfused_over_fused\": %.3f, \"messages_fused\": %.1f, "
          "\"messages_unfused\": %.1f, \"model_saving_ms\": %.3f}\n",
          get_world_size(), input.c_str(), up.c_str(), fuses ? "true" : "false", fused, unfused,
          unfused / fused, messages[0], messages[1], saving_ms);
    else
      std::printf(
          "P=%d input %s up %s: fused %.2f ms (%.0f messages), unfused %.2f ms (%.0f messages): "
          "%.3fx%s; the cost model's saving %.3f ms\n",
          get_world_size(), input.c_str(), up.c_str(), fused, messages[0], unfused, messages[1],
          unfused / fused, fuses ? "" : " (the cost model does not fuse it here)", saving_ms);
  }
  destroy_process_group();
  return 0;
}
