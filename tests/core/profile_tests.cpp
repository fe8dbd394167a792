// The operator profile (dtensor/core/profile.h): each outermost call counted
// once under its name, the communication inside it in its own column, and a
// rank that waits for a slower one shows the wait there.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using Catch::Contains;

namespace {

const OperatorTime* find_row(const std::vector<OperatorTime>& rows, const std::string& op) {
  for (const auto& r : rows)
    if (r.op == op) return &r;
  return nullptr;
}

// Profiling on for one test case, from an empty profile; off again after.
struct Profiling {
  Profiling() {
    reset_operator_profile();
    set_operator_profiling(true);
  }
  ~Profiling() {
    set_operator_profiling(false);
    reset_operator_profile();
  }
};

}  // namespace

DTENSOR_TEST_CASE("the operator profile counts each outermost call once, under its name",
                  "[profile]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const DTensor x = distribute_tensor(Tensor::rand({2, 3, 8, 8}, DType::F32, 1), mesh, {Shard(2)});
  reset_operator_profile();
  set_operator_profiling(false);
  (void)relu(x);
  CHECK(operator_profile().empty());  // off: nothing counted

  const Profiling on;
  CHECK(operator_profiling());
  for (int i = 0; i < 3; ++i)
    (void)relu(x);
  for (int i = 0; i < 2; ++i)
    (void)x.full_tensor();
  const auto rows = operator_profile();
  const OperatorTime* r = find_row(rows, "relu");
  REQUIRE(r != nullptr);
  CHECK(r->calls == 3);  // not the calls relu makes inside
  CHECK(r->seconds > 0);
  CHECK(r->comm_seconds <= r->seconds);
  const OperatorTime* f = find_row(rows, "full_tensor");
  REQUIRE(f != nullptr);
  CHECK(f->calls == 2);
  CHECK(f->comm_seconds > 0);  // an allgather
  CHECK(f->comm_seconds <= f->seconds);
  for (std::size_t i = 1; i < rows.size(); ++i)
    CHECK(rows[i - 1].seconds >= rows[i].seconds);

  const std::string table = format_operator_profile(rows);
  CHECK_THAT(table, Contains("relu") && Contains("full_tensor") && Contains("comm ms") &&
                        Contains("total"));

  // The gradients' reduction is a call of its own (what a backward ends in).
  const DTensor p = DTensor::from_local(Tensor::full({3}, 1.0, DType::F32), mesh, {Partial()});
  const auto reduced = reduce_partials({p, p});
  CHECK(reduced.at(0).to_local().data<float>()[0] == 2.0f);
  const auto after = operator_profile();
  const OperatorTime* g = find_row(after, "reduce_partials");
  REQUIRE(g != nullptr);
  CHECK(g->calls == 1);

  reset_operator_profile();
  CHECK(operator_profile().empty());
}

DTENSOR_TEST_CASE("the operator profile shows a rank's wait for a slower one as communication",
                  "[profile]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const DTensor x = distribute_tensor(Tensor::rand({4, 6}, DType::F64, 2), mesh, {Shard(0)});
  const Profiling on;
  if (get_rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  (void)x.full_tensor();
  const auto rows = operator_profile();
  const OperatorTime* f = find_row(rows, "full_tensor");
  REQUIRE(f != nullptr);
  CHECK(f->calls == 1);
  if (get_rank() == 0) {
    CHECK(f->comm_seconds >= 0.3);  // rank 1 came 400 ms later
    CHECK(f->seconds >= f->comm_seconds);
  } else {
    CHECK(f->comm_seconds < 0.2);  // rank 0 was there already
  }
}

DTENSOR_TEST_CASE("communication outside any call is profiled as (outside calls)", "[profile]", 2) {
  auto sub = world()->new_subgroup({0, 1});  // not the world: no call of its own
  const Profiling on;
  Tensor t = Tensor::full({16}, 1.0, DType::F32);
  sub->allreduce(t);
  CHECK(t.data<float>()[0] == 2.0f);
  const auto rows = operator_profile();
  const OperatorTime* o = find_row(rows, "(outside calls)");
  REQUIRE(o != nullptr);
  CHECK(o->calls == 0);
  CHECK(o->comm_seconds > 0);
  CHECK(o->seconds == o->comm_seconds);
}

namespace {
const KernelTime* find_kernel_row(const std::vector<KernelTime>& rows, const std::string& kernel) {
  for (const auto& r : rows)
    if (r.kernel == kernel && r.device == DeviceType::CPU && r.dtype == DType::F32) return &r;
  return nullptr;
}
}  // namespace

DTENSOR_TEST_CASE(
    "the kernel profile times each kernel call once, a slot's and a default path's, by the "
    "clock",
    "[profile]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const DTensor x = distribute_tensor(Tensor::rand({2, 4, 8, 8}, DType::F32, 4), mesh, {Shard(2)});
  // relu's default-path kernel, slowed by 30 ms a call: the clock must see it.
  const LocalKernel relu_kernel = op_kernel("relu", DeviceType::CPU, DType::F32);
  register_kernel(
      "relu", DeviceType::CPU, DType::F32,
      [relu_kernel](const KernelCall& c) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        return relu_kernel(c);
      },
      /*override_existing=*/true);
  reset_operator_profile();
  set_operator_profiling(false);
  (void)relu(x);
  CHECK(kernel_profile().empty());  // off: nothing counted
  {
    const Profiling on;
    for (int i = 0; i < 2; ++i)
      (void)relu(x);
    (void)group_norm(x, 2, std::nullopt, std::nullopt, 1e-5);
    const auto rows = kernel_profile();
    const KernelTime* r = find_kernel_row(rows, "relu");
    REQUIRE(r != nullptr);
    CHECK(r->calls == 2);
    CHECK(r->seconds >= 0.06);
    CHECK(r->seconds < 1.0);
    // group_norm's slots: its statistics and its normalisation, once each.
    for (const char* slot : {"norm.moments", "norm.apply"}) {
      INFO(slot);
      const KernelTime* k = find_kernel_row(rows, slot);
      REQUIRE(k != nullptr);
      CHECK(k->calls == 1);
    }
    // Kernels run inside the operators: their time is part of the calls'.
    double kernels = 0, calls = 0;
    for (const auto& k : rows)
      kernels += k.seconds;
    for (const auto& o : operator_profile())
      calls += o.seconds;
    CHECK(kernels <= calls);
    for (std::size_t i = 1; i < rows.size(); ++i)
      CHECK(rows[i - 1].seconds >= rows[i].seconds);
    const std::string table = format_kernel_profile(rows);
    CHECK_THAT(table, Contains("kernel") && Contains("norm.apply") && Contains("relu") &&
                          Contains("cpu") && Contains("f32") && Contains("total"));
    reset_operator_profile();
    CHECK(kernel_profile().empty());
  }
  register_kernel("relu", DeviceType::CPU, DType::F32, relu_kernel, true);
}

TEST_CASE("DTENSOR_PROFILE prints each rank's table once, with or without destroy_process_group",
          "[profile]") {
  using dtensor::testing::JobResult;
  using dtensor::testing::RankContext;
  using dtensor::testing::RunOptions;
  RunOptions opt;
  opt.env["DTENSOR_PROFILE"] = "on";
  // Both jobs are started before either is checked: a rank process runs only
  // its own call's body and returns from the others at once.
  std::vector<JobResult> jobs;
  for (const bool destroy : {true, false})
    jobs.push_back(dtensor::testing::run_ranks_collect(
        2,
        [destroy](RankContext& ctx) {
          DeviceMesh mesh(DeviceType::CPU, {2});
          const DTensor x =
              distribute_tensor(Tensor::rand({2, 4}, DType::F32, 3), mesh, {Shard(0)});
          (void)x.full_tensor();
          std::fflush(nullptr);
          if (destroy) {
            destroy_process_group();
          } else {
            // A program that returns from main without destroy_process_group.
            ctx.pg->barrier();
          }
          std::exit(0);
        },
        opt));
  if (dtensor::testing::in_rank_process()) return;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    INFO("destroy_process_group called: " << (j == 0));
    REQUIRE(jobs[j].passed());
    for (int r = 0; r < 2; ++r) {
      const std::string& out = jobs[j].ranks[static_cast<std::size_t>(r)].output;
      INFO(out);
      const std::string title = "dtensor profile, rank " + std::to_string(r);
      const auto first = out.find(title);
      REQUIRE(first != std::string::npos);
      CHECK(out.find(title, first + 1) == std::string::npos);  // once
      CHECK_THAT(out, Contains("full_tensor"));
      // The kernel table follows: full_tensor's local copy is no kernel, but
      // the table and its totals are printed all the same.
      CHECK_THAT(out, Contains("dtensor kernels, rank " + std::to_string(r)));
    }
  }
}
