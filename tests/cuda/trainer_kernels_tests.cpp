// Every kernel the trainer's step looks up on the CPU has a CUDA kernel of the
// same slot and dtype in the CUDA module, so `dtensor-train-unet --device
// cuda` does not stop at a kernel the module lacks. It needs no GPU: the
// module registers its kernels when it loads, without touching a device, so
// this runs in every CUDA build and fails here, not on the first GPU run.
// What the kernels compute on a GPU is kernel_slot_tests.cpp's and
// gpu_tests.cpp's.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/nn/clip_grad.h"
#include "dtensor/nn/optim.h"
#include "dtensor/ops/autocast.h"
#include "ops/detail/kernel_lookup_log.h"
#include "tests/support/multiprocess.h"
#include "tools/dtensor-train-unet/unet.h"

using namespace dtensor;
using dtensor::testing::run_ranks;

namespace {

// Each of the trainer's optimisers (--optimizer), with the settings that take
// every branch of its update: momentum, amsgrad, centred with momentum.
std::unique_ptr<nn::Optimizer> make_optimizer(int which, const nn::NamedParameters& params) {
  switch (which) {
    case 0: {
      nn::SGDOptions o;
      o.lr = 0.01;
      o.momentum = 0.9;
      o.weight_decay = 1e-4;
      return std::make_unique<nn::SGD>(params, o);
    }
    case 1: {
      nn::AdamOptions o;
      o.amsgrad = true;
      o.weight_decay = 1e-4;
      return std::make_unique<nn::Adam>(params, o);
    }
    case 2: {
      nn::AdamWOptions o;
      return std::make_unique<nn::AdamW>(params, o);
    }
    default: {
      nn::RMSpropOptions o;
      o.momentum = 0.9;
      o.centered = true;
      return std::make_unique<nn::RMSprop>(params, o);
    }
  }
}

// Two steps of the trainer's loop (forward and loss, backward, clipping, the
// optimiser), the second under bf16 autocast as --autocast bf16 runs it.
void train_steps(DType dtype, int optimizer, const DeviceMesh& mesh) {
  nn::manual_seed(3);
  train::UNet model(train::UNetShape{2, 1, 8, 2}, dtype);
  model.distribute(mesh);
  const Placements s2{Shard(2)};
  const DTensor x = distribute_tensor(Tensor::rand({2, 2, 16, 12}, dtype, 1), mesh, s2);
  const DTensor y = distribute_tensor(Tensor::rand({2, 1, 16, 12}, dtype, 2), mesh, s2);
  auto opt = make_optimizer(optimizer, model.named_parameters());
  for (int step = 0; step < 2; ++step) {
    const DTensor loss = [&] {
      const AutocastScope autocast(step == 1 && dtype == DType::F32, DType::BF16);
      return mse_loss(model(x), y);
    }();
    (void)loss.to_local().item_flat(0);
    backward(loss);
    nn::clip_grad_norm_(model.parameters(), 0.5);
    opt->step();
    opt->zero_grad();
  }
}

// Kernels that read small f64 host tensors (merged moments, a norm's
// statistics, cross_entropy's per-rank records) and run on the CPU for every
// device: reduce.var_from_moments (var moves its result), norm.merge_records,
// norm.stats, norm.grad_means and norm.running_update
// (dtensor/ops/kernels/norm_stats.h), loss.class_index_records_merge.
bool host_only(const std::string& name) {
  static const std::set<std::string> names = {
      "reduce.var_from_moments", "norm.merge_records",  "norm.stats",
      "norm.grad_means",         "norm.running_update", "loss.class_index_records_merge"};
  return names.count(name) == 1;
}

}  // namespace

TEST_CASE("cuda module: every kernel of the trainer's step on the CPU has a CUDA kernel",
          "[cuda][module]") {
  run_ranks(2, [](testing::RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    std::set<detail::KernelKey> used;
    {
      const detail::KernelLookupLog log;
      for (DType dt : {DType::F32, DType::F64})
        for (int optimizer = 0; optimizer < 4; ++optimizer)
          train_steps(dt, optimizer, mesh);
      used = log.keys();
    }
    // The CPU-side test is only worth something if the log saw the step.
    CHECK(used.count({"optim.sgd", DeviceType::CPU, DType::F32}) == 1);
    CHECK(std::any_of(used.begin(), used.end(),
                      [](const detail::KernelKey& k) { return std::get<2>(k) == DType::BF16; }));
    REQUIRE(cuda::is_built());  // loads the module, which registers its kernels
    std::vector<std::string> missing;
    for (const auto& [name, device, dtype] : used)
      if (device == DeviceType::CPU && !host_only(name) &&
          !detail::has_typed_kernel(name, DeviceType::CUDA, dtype))
        missing.push_back(fmt::format("{} {}", name, dtype_name(dtype)));
    std::string list;
    for (const auto& m : missing)
      list += (list.empty() ? "" : ", ") + m;
    INFO("looked up on the CPU, no CUDA kernel: " << list);
    CHECK(missing.empty());
  });
}

TEST_CASE("cuda module: every CPU kernel of the library has a CUDA kernel, but the one named",
          "[cuda][module]") {
  REQUIRE(cuda::is_built());  // loads the module, which registers its kernels
  // conv.depthwise_weight_grad is a piece of oneDNN's CPU path (its weight
  // gradient wider than 3x3); cuDNN runs the whole depthwise convolution.
  const std::set<std::string> cpu_only = {"conv.depthwise_weight_grad"};
  std::vector<std::string> missing;
  for (const auto& [name, device, dtype] : detail::registered_kernel_keys())
    if (device == DeviceType::CPU && cpu_only.count(name) == 0 && !host_only(name) &&
        !detail::has_typed_kernel(name, DeviceType::CUDA, dtype))
      missing.push_back(name + " " + std::string(dtype_name(dtype)));
  std::string list;
  for (const auto& m : missing)
    list += (list.empty() ? "" : ", ") + m;
  INFO("CPU kernels without a CUDA kernel: " << list);
  CHECK(missing.empty());
}
