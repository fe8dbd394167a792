// DeviceMesh: coordinates, per-dimension groups, meshes over some of the ranks.
#include <catch2/catch.hpp>

#include "dtensor/core/device_mesh.h"
#include "dtensor/placement/dtensor.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

TEST_CASE("2x2 mesh: coordinates, local ranks and row/column groups P=4", "[mesh][mp]") {
  run_ranks(4, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const auto c = *mesh.get_coordinate();
    REQUIRE(c == std::vector<std::int64_t>{ctx.rank / 2, ctx.rank % 2});
    REQUIRE(mesh.get_local_rank(0) == ctx.rank / 2);
    REQUIRE(mesh.get_local_rank(1) == ctx.rank % 2);
    REQUIRE(mesh.get_group(0)->size() == 2);
    REQUIRE(mesh.get_group(0)->rank() == ctx.rank / 2);
    REQUIRE(mesh.get_group(1)->rank() == ctx.rank % 2);
    // Sum of world ranks over each group, checked against the layout.
    Tensor t = Tensor::full({1}, ctx.rank, DType::F64);
    mesh.get_group(0)->allreduce(t);
    REQUIRE(t.item({0}) == 2 * (ctx.rank % 2) + 2);  // column: r%2 + (r%2 + 2)
    Tensor u = Tensor::full({1}, ctx.rank, DType::F64);
    mesh.get_group(1)->allreduce(u);
    REQUIRE(u.item({0}) == 4 * (ctx.rank / 2) + 1);  // row: 2k + 2k+1
    REQUIRE(mesh.rank_at({1, 0}) == 2);
    REQUIRE(mesh.str() == "DeviceMesh(cpu, [2, 2], ranks=[0, 1, 2, 3])");
  });
}

TEST_CASE("mesh over some of the world's ranks: outsiders have no coordinate P=4", "[mesh][mp]") {
  run_ranks(4, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2}, {1, 3});
    if (ctx.rank == 1 || ctx.rank == 3) {
      REQUIRE(mesh.get_coordinate().has_value());
      REQUIRE(mesh.get_local_rank(0) == ctx.rank / 2);
      Tensor t = Tensor::full({1}, ctx.rank, DType::F64);
      mesh.get_group(0)->allreduce(t);
      REQUIRE(t.item({0}) == 4.0);
    } else {
      REQUIRE_FALSE(mesh.get_coordinate().has_value());
      REQUIRE_THROWS_AS(mesh.get_group(0), InvalidArgument);
      // Every use names the mesh and this rank.
      const std::string me = "rank " + std::to_string(ctx.rank) +
                             " is not in DeviceMesh(cpu, [2], ranks=[1, 3]) (a mesh of 2 of the "
                             "world's 4 ranks)";
      REQUIRE_THROWS_WITH(mesh.get_group(0), Catch::Contains("get_group: " + me));
      REQUIRE_THROWS_WITH(mesh.get_mesh_group(), Catch::Contains("get_mesh_group: " + me));
      REQUIRE_THROWS_WITH(mesh.get_local_rank(0), Catch::Contains("get_local_rank: " + me));
    }
  });
}

TEST_CASE("DTensor::item: the one element on every rank, InvalidArgument otherwise P=2",
          "[mesh][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const double v = 0.1 + 0.2;  // not exactly representable: the bits must survive
    const Tensor one = Tensor::full({1}, v, DType::F64);
    CHECK(distribute_tensor(one, mesh, {Replicate()}).item() == v);
    CHECK(distribute_tensor(one, mesh, {Shard(0)}).item() == v);  // rank 1's shard is empty
    CHECK(distribute_tensor(Tensor::full({}, v, DType::F64), mesh, {Replicate()}).item() == v);
    // Partial(sum): index 0 holds v, index 1 zeros; the sum is v.
    CHECK(distribute_tensor(one, mesh, {Partial()}).item() == v);
    CHECK(distribute_tensor(Tensor::full({1, 1}, 2.5, DType::F32), mesh, {Shard(1)}).item() == 2.5);
    const DTensor two = distribute_tensor(Tensor::zeros({2}, DType::F64), mesh, {Shard(0)});
    REQUIRE_THROWS_AS(two.item(), InvalidArgument);
    REQUIRE_THROWS_WITH(two.item(), Catch::Contains("numel 2"));
    const DTensor none = distribute_tensor(Tensor::zeros({0, 3}, DType::F64), mesh, {Shard(0)});
    REQUIRE_THROWS_WITH(none.item(), Catch::Contains("numel 0"));
  });
}

TEST_CASE("3-D mesh 2x1x2: groups per dim have sizes 2, 1, 2 P=4", "[mesh][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 1, 2});
    REQUIRE(mesh.ndim() == 3);
    REQUIRE(mesh.get_group(0)->size() == 2);
    REQUIRE(mesh.get_group(1)->size() == 1);
    REQUIRE(mesh.get_group(2)->size() == 2);
    Tensor t = Tensor::full({3}, 1.0, DType::F32);
    mesh.get_group(1)->allreduce(t);  // a one-rank group: unchanged, no traffic
    REQUIRE(t.item({2}) == 1.0);
  });
}

TEST_CASE(
    "get_group over several mesh dims: the block of ranks sharing the other coordinates, "
    "on whole-world and partial meshes P=4",
    "[mesh][mp]") {
  run_ranks(4, [](RankContext& ctx) {
    // 2x2x1 over the world: dims {0, 2} span the column of this rank (its
    // coordinate on dim 1 fixed), dims {0, 1} the whole mesh.
    DeviceMesh mesh(DeviceType::CPU, {2, 2, 1});
    const auto block = mesh.get_group(std::vector<std::int64_t>{0, 2});
    REQUIRE(block->size() == 2);
    REQUIRE(block->rank() == ctx.rank / 2);
    Tensor t = Tensor::full({1}, static_cast<double>(1 << ctx.rank), DType::F64);
    block->allreduce(t);
    // Ranks 0 and 2 share coordinate 0 on dim 1, ranks 1 and 3 coordinate 1.
    REQUIRE(t.item({0}) == (ctx.rank % 2 == 0 ? 1.0 + 4.0 : 2.0 + 8.0));
    REQUIRE(mesh.get_group(std::vector<std::int64_t>{0, 2}) == block);  // made once
    REQUIRE(mesh.get_group(std::vector<std::int64_t>{1, 0}) == mesh.get_mesh_group());
    REQUIRE(mesh.get_group(std::vector<std::int64_t>{1}) == mesh.get_group(1));
    REQUIRE_THROWS_WITH(mesh.get_group(std::vector<std::int64_t>{}),
                        Catch::Contains("get_group: dims is empty"));
    REQUIRE_THROWS_WITH(mesh.get_group(std::vector<std::int64_t>{0, 3}),
                        Catch::Contains("dims has 3"));
    REQUIRE_THROWS_WITH(mesh.get_group(std::vector<std::int64_t>{2, 2}),
                        Catch::Contains("dims has 2 twice"));

    // A 1x2x1 mesh over ranks 1 and 3 only: its block over {1, 2} is made by
    // its two members alone (rank 0 and 2 never take part).
    DeviceMesh part(DeviceType::CPU, {1, 2, 1}, {1, 3});
    if (part.contains_this_rank()) {
      const auto g = part.get_group(std::vector<std::int64_t>{1, 2});
      Tensor u = Tensor::full({1}, static_cast<double>(ctx.rank), DType::F64);
      g->allreduce(u);
      REQUIRE(u.item({0}) == 4.0);
    }
  });
}

TEST_CASE("mesh errors: size larger than the world, repeated ranks, bad shapes P=2",
          "[mesh][errors][mp]") {
  run_ranks(2, [](RankContext&) {
    REQUIRE_THROWS_AS(DeviceMesh(DeviceType::CPU, {4}), InvalidArgument);
    REQUIRE_THROWS_AS(DeviceMesh(DeviceType::CPU, {2}, {0, 0}), InvalidArgument);
    REQUIRE_THROWS_AS(DeviceMesh(DeviceType::CPU, {2}, {0, 2}), InvalidArgument);
    REQUIRE_THROWS_AS(DeviceMesh(DeviceType::CPU, {0}), InvalidArgument);
    REQUIRE_THROWS_AS(DeviceMesh(DeviceType::CPU, {1, 1, 1, 2}), InvalidArgument);
    REQUIRE_THROWS_AS(DeviceMesh(DeviceType::CPU, {3}, {0, 1}), InvalidArgument);
  });
}
