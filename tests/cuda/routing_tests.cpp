// Which backend serves which tensors, and the public CUDA API's answers in a
// build or on a machine without CUDA. Runs in every build.
#include <catch2/catch.hpp>

#include "core/detail/backend_plan.h"
#include "core/detail/routing_process_group.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/tensor.h"
#include "dtensor/cuda.h"
#include "tests/support/scoped_config.h"

using namespace dtensor;
using detail::plan_backends;
using detail::Route;
using detail::route_for;

TEST_CASE("backend plan: plain names, nccl, auto and device lists", "[cuda][routing]") {
  CHECK(plan_backends("gloo", 0).str() == "gloo");
  CHECK_FALSE(plan_backends("gloo", 4).routed());
  CHECK(plan_backends("nccl", 0).str() == "cpu:gloo,cuda:nccl");
  CHECK(plan_backends("auto", 0).str() == "gloo");
  CHECK(plan_backends("auto", 2).str() == "cpu:gloo,cuda:nccl");
  CHECK(plan_backends("cpu:gloo,cuda:nccl", 0).str() == "cpu:gloo,cuda:nccl");
  CHECK(plan_backends(" cuda:nccl , cpu:gloo ", 0).str() == "cpu:gloo,cuda:nccl");
  const auto staged = plan_backends("cpu:gloo,cuda:gloo", 1);
  CHECK(staged.routed());
  CHECK(staged.cuda_staged());
  CHECK(plan_backends("cuda:gloo", 0).cuda_staged());
  CHECK_FALSE(plan_backends("nccl", 1).cuda_staged());
}

TEST_CASE("backend plan: malformed specs name the fault", "[cuda][routing]") {
  CHECK_THROWS_WITH(plan_backends("", 0), Catch::Contains("empty backend"));
  CHECK_THROWS_WITH(plan_backends("gloo,nccl", 0), Catch::Contains("cpu:NAME,cuda:NAME"));
  CHECK_THROWS_WITH(plan_backends("tpu:gloo", 0), Catch::Contains("unknown device 'tpu'"));
  CHECK_THROWS_WITH(plan_backends("cpu:gloo,cpu:gloo", 0), Catch::Contains("named twice"));
  CHECK_THROWS_WITH(plan_backends("cpu:nccl", 0), Catch::Contains("cannot serve CPU"));
  CHECK_THROWS_WITH(plan_backends("cpu:gloo,cuda:mpi", 0), Catch::Contains("CUDA tensors go"));
  CHECK_THROWS_AS(plan_backends("cpu:", 0), InvalidArgument);
}

TEST_CASE("routing: CPU tensors direct, CUDA tensors to NCCL or staged", "[cuda][routing]") {
  CHECK(route_for(Device::cpu(), true) == Route::Cpu);
  CHECK(route_for(Device::cpu(), false) == Route::Cpu);
  CHECK(route_for(Device::cuda(0), true) == Route::Cuda);
  CHECK(route_for(Device::cuda(3), false) == Route::CudaStaged);
  CHECK(detail::route_name(Route::CudaStaged) == "cuda-staged");
}

TEST_CASE("cuda API: answers without a device instead of failing", "[cuda]") {
#ifdef DTENSOR_TEST_WITH_CUDA
  CHECK(cuda::is_built());
#else
  CHECK_FALSE(cuda::is_built());
#endif
  if (cuda::is_available()) {
    WARN("a CUDA device is present: the no-device answers are not exercised");
    CHECK(cuda::device_count() > 0);
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_FALSE(cuda::unavailable_reason().empty());
  WARN("no usable CUDA device: " << cuda::unavailable_reason());
  CHECK(cuda::current_device() == 0);
  CHECK_NOTHROW(cuda::synchronize());
  CHECK_THROWS_AS(Tensor::empty({2, 3}, DType::F32, Device::cuda(0)), NotSupported);
  CHECK_THROWS_AS(Tensor::zeros({4}, DType::F32).to(Device::cuda(0)), NotSupported);
  // A CPU tensor moved to the CPU is itself: no copy, no backend needed.
  Tensor t = Tensor::zeros({4}, DType::F32);
  CHECK(t.to(Device::cpu()).shares_storage_with(t));
}

TEST_CASE("nccl backend: without a GPU it fails clearly, not with a hang", "[cuda][nccl]") {
  if (cuda::is_available()) {
    WARN("a CUDA device is present: covered by the GPU tests");
    return;
  }
  InitOptions o;
  o.backend = "nccl";
  o.rank = 0;
  o.world_size = 1;
  try {
    init_process_group(o);
    FAIL("init_process_group(nccl) succeeded without a GPU");
  } catch (const NotSupported& e) {
    const std::string what = e.what();
#ifdef DTENSOR_TEST_WITH_CUDA
    CHECK_THAT(what, Catch::Contains("no CUDA device"));
#else
    CHECK_THAT(what, Catch::Contains("built without CUDA"));
#endif
  }
  CHECK_FALSE(is_initialized());
}

TEST_CASE("init options: DTENSOR_BACKEND picks the backend when none is passed",
          "[cuda][routing]") {
  {
    const testing::ScopedConfig env([](Config& c) {
      c = Config::from(
          std::map<std::string, std::string>{{"DTENSOR_BACKEND", "cpu:gloo,cuda:gloo"}});
    });
    InitOptions o;
    o.world_size = 1;
    CHECK(resolve_init_options(o).backend == "cpu:gloo,cuda:gloo");
    o.backend = "gloo";
    CHECK(resolve_init_options(o).backend == "gloo");
  }
  const testing::ScopedConfig none(
      [](Config& c) { c = Config::from(std::map<std::string, std::string>{}); });
  CHECK(resolve_init_options(InitOptions{}).backend == "gloo");
}
