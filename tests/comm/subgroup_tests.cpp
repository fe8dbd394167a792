// Subgroups: group-relative ranks, world-rank mapping, collectives and P2P
// inside them, unique rendezvous for repeated and one-member groups.
#include <catch2/catch.hpp>

#include "tests/comm/comm_test_util.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

TEST_CASE("subgroups: rows and columns of a 2x2 layout P=4", "[comm][subgroup]") {
  // World rank w sits at (row w / 2, column w % 2).
  run_ranks(4, [](RankContext& ctx) {
    auto& world = *ctx.pg;
    const int w = ctx.rank, row = w / 2, col = w % 2;
    auto row_group = world.new_subgroup({2 * row, 2 * row + 1});
    auto col_group = world.new_subgroup({col, col + 2});
    REQUIRE(row_group->size() == 2);
    REQUIRE(col_group->size() == 2);
    CHECK(row_group->rank() == col);
    CHECK(col_group->rank() == row);
    CHECK(row_group->global_ranks() == std::vector<int>{2 * row, 2 * row + 1});
    CHECK(col_group->global_ranks() == std::vector<int>{col, col + 2});
    CHECK(row_group->backend_name() == "gloo");

    // Allreduce along rows then columns: every rank ends with the world sum.
    Tensor t = Tensor::full({5}, 1.0 + w, DType::F64);
    row_group->allreduce(t);
    CHECK(max_error(t, [&](auto) { return (1.0 + 2 * row) + (2.0 + 2 * row); }) == 0);
    col_group->allreduce(t);
    CHECK(max_error(t, [](auto) { return 1.0 + 2.0 + 3.0 + 4.0; }) == 0);

    // Allgather in a column: uneven counts, group-relative order.
    const std::vector<std::int64_t> counts = {1, 3};
    Tensor in = Tensor::full({counts[row]}, 10.0 * w, DType::F32);
    Tensor out = Tensor::zeros({4}, DType::F32);
    col_group->allgather(in, out, counts);
    CHECK(out.item_flat(0) == 10.0 * col);
    for (int i = 1; i < 4; ++i)
      CHECK(out.item_flat(i) == 10.0 * (col + 2));

    // P2P inside a row uses row ranks, not world ranks.
    Tensor mine = Tensor::full({3}, 100.0 + w, DType::F32), theirs = Tensor::zeros({3}, DType::F32);
    const int peer = 1 - col;
    auto works = row_group->batch_isend_irecv({P2POp::send(mine, peer), P2POp::recv(theirs, peer)});
    wait_all(works);
    CHECK(max_error(theirs, [&](auto) { return 100.0 + 2 * row + peer; }) == 0);
    // Traffic is counted on the group that carried it.
    CHECK(row_group->counters().messages_sent > 0);
    row_group->barrier();
    col_group->barrier();
  });
}

TEST_CASE("subgroups: repeated member lists, one-member groups, non-members skip P=3",
          "[comm][subgroup]") {
  run_ranks(3, [](RankContext& ctx) {
    auto& world = *ctx.pg;
    const int r = ctx.rank;
    // A one-member group needs no connection and works locally.
    auto alone = world.new_subgroup({r});
    CHECK(alone->size() == 1);
    CHECK(alone->rank() == 0);
    CHECK(alone->global_ranks() == std::vector<int>{r});
    Tensor t = Tensor::full({4}, 3.0, DType::BF16);
    alone->allreduce(t, ReduceOp::Avg);
    alone->barrier();
    CHECK(max_error(t, [](auto) { return 3.0; }) == 0);
    CHECK(alone->counters().bytes_sent == 0);
    // Only 0 and 2 create {0, 2}, twice: each one its own connections.
    if (r != 1) {
      auto a = world.new_subgroup({0, 2});
      auto b = world.new_subgroup({0, 2});
      Tensor x = Tensor::full({2}, r == 0 ? 1.0 : 5.0, DType::F32);
      Tensor y = Tensor::full({2}, r == 0 ? 7.0 : 2.0, DType::F32);
      b->allreduce(y, ReduceOp::Min);
      a->allreduce(x, ReduceOp::Max);
      CHECK(max_error(x, [](auto) { return 5.0; }) == 0);
      CHECK(max_error(y, [](auto) { return 2.0; }) == 0);
    }
    world.barrier();
  });
}

TEST_CASE("subgroups nest and map to world ranks P=4", "[comm][subgroup]") {
  run_ranks(4, [](RankContext& ctx) {
    auto& world = *ctx.pg;
    if (ctx.rank == 0) {
      world.barrier();
      return;
    }
    auto upper = world.new_subgroup({1, 2, 3});
    CHECK(upper->rank() == ctx.rank - 1);
    if (ctx.rank != 2) {
      auto ends = upper->new_subgroup({0, 2});  // world ranks 1 and 3
      CHECK(ends->global_ranks() == std::vector<int>{1, 3});
      CHECK(ends->rank() == (ctx.rank == 1 ? 0 : 1));
      Tensor t = Tensor::full({3}, static_cast<double>(ctx.rank), DType::F64);
      ends->broadcast(t, 1);
      CHECK(max_error(t, [](auto) { return 3.0; }) == 0);
    }
    Tensor s = Tensor::full({1}, static_cast<double>(ctx.rank), DType::F32);
    upper->allreduce(s);
    CHECK(s.item_flat(0) == 6.0);
    world.barrier();
  });
}

TEST_CASE("new_subgroup rejects bad member lists P=2", "[comm][subgroup][validation]") {
  run_ranks(2, [](RankContext& ctx) {
    auto& world = *ctx.pg;
    CHECK_THROWS_AS(world.new_subgroup({}), InvalidArgument);
    CHECK_THROWS_WITH(world.new_subgroup({1, 0}), Catch::Contains("strictly increasing"));
    CHECK_THROWS_WITH(world.new_subgroup({0, 2}), Catch::Contains("ranks[1]=2"));
    CHECK_THROWS_WITH(world.new_subgroup({1 - ctx.rank}), Catch::Contains("not in ranks"));
    world.barrier();
  });
}

TEST_CASE("split_groups: every rank splits alike, gets its list's group or none P=4",
          "[comm][subgroup][split]") {
  run_ranks(4, [](RankContext& ctx) {
    auto& world = *ctx.pg;
    const int w = ctx.rank;
    // Columns of a 2x2 layout, in one collective call.
    auto col = world.split_groups({{0, 2}, {1, 3}});
    REQUIRE(col != nullptr);
    CHECK(col->size() == 2);
    CHECK(col->rank() == w / 2);
    CHECK(col->global_ranks() == std::vector<int>{w % 2, w % 2 + 2});
    Tensor t = Tensor::full({3}, 1.0 + w, DType::F16);
    col->allreduce(t);
    CHECK(max_error(t, [&](auto) { return (1.0 + w % 2) + (3.0 + w % 2); }) == 0);
    // Ranks in no list get no group (and the others still get theirs).
    auto some = world.split_groups({{1, 2}});
    CHECK((some != nullptr) == (w == 1 || w == 2));
    if (some) {
      Tensor u = Tensor::full({1}, 10.0 * w, DType::F32);
      some->allreduce(u, ReduceOp::Max);
      CHECK(u.item({0}) == 20.0);
    }
    // Bad lists: the same InvalidArgument naming them on every rank.
    CHECK_THROWS_AS(world.split_groups({{0, 1}, {1, 2}}), InvalidArgument);
    CHECK_THROWS_WITH(world.split_groups({{0, 1}, {1, 2}}), Catch::Contains("groups"));
    CHECK_THROWS_WITH(world.split_groups({{2, 1}}), Catch::Contains("strictly increasing"));
    CHECK_THROWS_WITH(world.split_groups({{0, 4}}), Catch::Contains("outside"));
    world.barrier();
  });
}
