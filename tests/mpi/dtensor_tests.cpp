// The library above the process group, under mpirun: redistribute between
// every placement pair (the layout oracle of tests/placement) and a seeded
// subset of the convolution differential suite (the f64 oracle of
// tools/reference), on a 1-D mesh of the world and on a 2x2 mesh.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <thread>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/fault.h"
#include "dtensor/core/profile.h"
#include "dtensor/dtensor.h"
#include "tests/conv/conv_case.h"
#include "tests/placement/redistribute_check.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {
const std::vector<Placement> kPlacements = {Shard(0), Shard(1), Replicate(), Partial()};
}

// Under mpirun there is no store and so no fault monitor; its layer, which
// times the profile's communication and keeps the flight recorder, comes
// without it. The oracle is a sleep: rank 0 must see the one it waited for.
TEST_CASE("mpi: the operator profile and the flight recorder work without a store",
          "[mpi][profile]") {
  const int P = get_world_size();
  DeviceMesh mesh(DeviceType::CPU, {P});
  const DTensor x = distribute_tensor(Tensor::rand({4 * P, 6}, DType::F64, 2), mesh, {Shard(0)});
  auto find = [](const std::vector<OperatorTime>& rows, const std::string& op) {
    for (const auto& r : rows)
      if (r.op == op) return r;
    return OperatorTime{};
  };
  reset_operator_profile();
  set_operator_profiling(true);
  if (get_rank() == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  (void)x.full_tensor();
  Tensor t = Tensor::full({8}, 1.0, DType::F32);
  world()->allreduce(t);  // the world's own collective: a call of its own
  std::vector<int> everyone(static_cast<std::size_t>(P));
  std::iota(everyone.begin(), everyone.end(), 0);
  auto sub = world()->new_subgroup(everyone);  // not the world: no call of its own
  sub->allreduce(t);
  const auto rows = operator_profile();
  set_operator_profiling(false);
  reset_operator_profile();
  const OperatorTime f = find(rows, "full_tensor");
  CHECK(f.calls == 1);
  if (get_rank() == 0) {
    CHECK(f.comm_seconds >= 0.3);  // the last rank came 400 ms later
    CHECK(f.seconds >= f.comm_seconds);
  }
  const OperatorTime a = find(rows, "allreduce");
  CHECK(a.calls == 1);
  CHECK(a.comm_seconds > 0);
  CHECK(t.data<float>()[0] == static_cast<float>(P * P));
  CHECK(find(rows, "(outside calls)").comm_seconds > 0);

  const std::string path = dump_flight_recorder();
  REQUIRE(!path.empty());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("allreduce world all 32 completed"));
  std::remove(path.c_str());
}

TEST_CASE("mpi: redistribute every placement pair on a 1-D mesh of the world", "[mpi]") {
  const int P = get_world_size();
  DeviceMesh mesh(DeviceType::CPU, {P});
  for (const auto& s : kPlacements)
    for (const auto& d : kPlacements) {
      if (is_error_pair({s}, {d}))
        check_error_pair(mesh, {10, 7}, {s}, {d});
      else
        check_transition(mesh, {10, 7}, DType::F64, {s}, {d});
    }
}

TEST_CASE("mpi: redistribute from every placement pair to every other on a 2x2 mesh", "[mpi]") {
  REQUIRE(get_world_size() == 4);
  DeviceMesh mesh(DeviceType::CPU, {2, 2});
  for (const auto& s0 : kPlacements)
    for (const auto& s1 : kPlacements)
      for (const auto& d0 : kPlacements)
        for (const auto& d1 : kPlacements) {
          const Placements src{s0, s1}, dst{d0, d1};
          if (is_error_pair(src, dst))
            check_error_pair(mesh, {10, 7}, src, dst);
          else
            check_transition(mesh, {10, 7}, DType::F64, src, dst);
        }
}

TEST_CASE("mpi: convolution forward and backward against the f64 oracle", "[mpi][conv]") {
  const int P = get_world_size();
  const std::vector<Shape> meshes =
      P == 4 ? std::vector<Shape>{{4}, {2, 2}} : std::vector<Shape>{{P}};
  for (const Shape& mesh : meshes)
    for (DType dt : {DType::F64, DType::F32}) {
      // Every rank draws the same configs from the same seed.
      std::mt19937_64 rng(1234 + mesh.size() * 10 + static_cast<int>(dt));
      for (int k = 0; k < 8; ++k)
        check_conv_case(random_conv_case(rng, mesh, dt));
      check_conv_case(random_padding_mode_case(rng, mesh, dt));
    }
}
