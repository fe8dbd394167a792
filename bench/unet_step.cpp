// One training step of the trainer's U-Net (forward, backward, SGD) on a
// mesh of the world size, data sharded along H: the median step time, and
// its forward / backward / update parts. bench/run_suite.py runs it at P = 2
// and, side by side, on one process with the input of one rank's shard, to
// report the overhead of spatial parallelism on a whole network.
//
//   dtensor-run -n 2 --bind-cores -- dtensor-bench-unet-step --input 4,8,256,256 --json
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "dtensor/dtensor.h"
#include "median.h"
#include "tools/dtensor-train-unet/unet.h"

using namespace dtensor;
using Clock = std::chrono::steady_clock;

namespace {

using dtensor::bench::median;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  std::string input = "4,8,256,256";
  std::int64_t base = 16, groups = 4, iters = 5, warmup = 2;
  bool json = false;
  CLI::App app{"U-Net training step benchmark", "dtensor-bench-unet-step"};
  app.add_option("--input", input, "N,C,H,W of the whole batch");
  app.add_option("--base", base, "channels of the first level");
  app.add_option("--groups", groups, "GroupNorm groups");
  app.add_option("--iters", iters, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_flag("--json", json, "one JSON line");
  CLI11_PARSE(app, argc, argv);
  const Shape shape = parse_int_list(input, "--input");

  init_process_group();
  const DeviceMesh mesh(DeviceType::CPU, {get_world_size()});
  nn::manual_seed(1);
  train::UNet model({shape[1], 1, base, groups}, DType::F32);
  model.distribute(mesh);
  nn::SGD sgd(model.named_parameters(), {.lr = 1e-3, .momentum = 0.9});
  const DTensor x = distribute_tensor(Tensor::rand(shape, DType::F32, 2), mesh, {Shard(2)});
  const DTensor y = distribute_tensor(
      Tensor::rand({shape[0], 1, shape[2], shape[3]}, DType::F32, 3), mesh, {Shard(2)});

  // What rank 0 sends per timed step (messages and bytes, the step's two
  // barriers included), over the world's group and the mesh's when it is
  // another: the inputs of the scaling model (bench/unet_scaling_model.py).
  std::vector<std::shared_ptr<ProcessGroup>> groups_used{world()};
  if (mesh.get_group(0) != world()) groups_used.push_back(mesh.get_group(0));
  auto sent = [&] {
    std::pair<std::uint64_t, std::uint64_t> s{0, 0};
    for (const auto& g : groups_used) {
      s.first += g->counters().messages_sent.load();
      s.second += g->counters().bytes_sent.load();
    }
    return s;
  };
  std::pair<std::uint64_t, std::uint64_t> sent_before{0, 0};
  std::vector<double> fwd, bwd, opt, step;
  for (std::int64_t i = 0; i < warmup + iters; ++i) {
    if (i == warmup) sent_before = sent();
    world()->barrier();
    const auto t0 = Clock::now();
    const DTensor loss = mse_loss(model(x), y);
    const double f = ms_since(t0);
    const auto t1 = Clock::now();
    backward(loss);
    const double b = ms_since(t1);
    const auto t2 = Clock::now();
    sgd.step();
    sgd.zero_grad();
    const double o = ms_since(t2);
    world()->barrier();
    if (i < warmup) continue;
    fwd.push_back(f);
    bwd.push_back(b);
    opt.push_back(o);
    step.push_back(ms_since(t0));
  }
  const auto sent_after = sent();
  const double per_step = 1.0 / static_cast<double>(std::max<std::int64_t>(iters, 1));
  const double messages = static_cast<double>(sent_after.first - sent_before.first) * per_step;
  const double bytes = static_cast<double>(sent_after.second - sent_before.second) * per_step;
  if (get_rank() == 0) {
    if (json)
      std::printf(
          "{\"P\": %d, \"input\": \"%s\", \"base\": %ld, \"step_ms\": %.3f, \"fwd_ms\": %.3f, "
          "\"bwd_ms\": %.3f, \"opt_ms\": %.3f, \"messages_per_step\": %.1f, "
          "\"bytes_per_step\": %.0f}\n",
          get_world_size(), input.c_str(), static_cast<long>(base), median(step), median(fwd),
          median(bwd), median(opt), messages, bytes);
    else
      std::printf("P=%d input %s: step %.2f ms (forward %.2f, backward %.2f, update %.2f)\n",
                  get_world_size(), input.c_str(), median(step), median(fwd), median(bwd),
                  median(opt));
  }
  destroy_process_group();
  return 0;
}
