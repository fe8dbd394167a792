// Multi-process redistribute tests: every transition pair on 1-D meshes
// (P = 1..5) and from every placement pair on a 2x2 mesh, uneven and empty
// shards, exact round trips and Partial sums, and the error cases.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "dtensor/core/device_mesh.h"
#include "dtensor/placement/bucketed_reduce.h"
#include "dtensor/placement/dtensor.h"
#include "dtensor/placement/redistribute.h"
#include "tests/placement/redistribute_check.h"
#include "tests/placement/redistribute_oracle.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using dtensor::testing::check_error_pair;
using dtensor::testing::check_transition;
using dtensor::testing::is_error_pair;
using dtensor::testing::oracle_local;
using dtensor::testing::RankContext;
using dtensor::testing::register_test;
using dtensor::testing::run_ranks;

namespace {

const std::vector<Placement> kPlacements = {Shard(0), Shard(1), Replicate(), Partial()};

std::string shape_tag(const Shape& g, const Shape& mesh) {
  bool even = true, empty = false;
  for (auto L : g)
    for (auto n : mesh) {
      even = even && L % n == 0;
      empty = empty || (L + n - 1) / n * (n - 1) >= L;
    }
  return empty ? "empty shards" : even ? "even" : "uneven";
}

DTENSOR_TEST_REGISTRAR {
  // 1-D meshes: every (src, dst) pair for P = 1..4 on a 10x7 tensor (10 over
  // 4 -> 3,3,3,1), and P = 5 on 8x5 (8 over 5 -> 2,2,2,2,0).
  for (int P = 1; P <= 5; ++P) {
    const Shape g = P == 5 ? Shape{8, 5} : Shape{10, 7};
    for (const auto& s : kPlacements)
      for (const auto& d : kPlacements) {
        const Placements src{s}, dst{d};
        const bool err = is_error_pair(src, dst);
        if (err && P > 2) continue;  // the error is checked at P = 1, 2
        const std::string name = fmt::format("redistribute {}->{} {} P={}{}", s.str(), d.str(),
                                             shape_tag(g, {P}), P, err ? " is an error" : "");
        register_test(name, "[redistribute][mp]", [=] {
          run_ranks(P, [=](RankContext&) {
            DeviceMesh mesh(DeviceType::CPU, {P});
            if (err)
              check_error_pair(mesh, g, src, dst);
            else
              check_transition(mesh, g, DType::F64, src, dst);
          });
        });
      }
  }
  // 2x2 mesh: from each placement pair to every other (nested shards like
  // S(0),S(0) included), on an uneven 10x7 tensor.
  for (const auto& s0 : kPlacements)
    for (const auto& s1 : kPlacements) {
      const Placements src{s0, s1};
      const std::string name = fmt::format(
          "redistribute 2x2 mesh from {} to every placement pair uneven", placements_str(src));
      register_test(name, "[redistribute][mp][2d]", [=] {
        run_ranks(4, [=](RankContext&) {
          DeviceMesh mesh(DeviceType::CPU, {2, 2});
          for (const auto& d0 : kPlacements)
            for (const auto& d1 : kPlacements) {
              const Placements dst{d0, d1};
              if (is_error_pair(src, dst))
                check_error_pair(mesh, {10, 7}, src, dst);
              else
                check_transition(mesh, {10, 7}, DType::F64, src, dst);
            }
        });
      });
    }
}

}  // namespace

TEST_CASE("redistribute f32 bf16 and f16 integer data exactly on a 1-D mesh P=3",
          "[redistribute][mp]") {
  run_ranks(3, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (const auto& s : kPlacements)
        for (const auto& d : kPlacements)
          if (!is_error_pair({s}, {d})) check_transition(mesh, {7, 10, 3}, dt, {s}, {d});
  });
}

TEST_CASE("redistribute on a 2x1x2 mesh with a 3-D tensor, S(2)->S(0) all-to-all P=4",
          "[redistribute][mp][3d]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 1, 2});
    check_transition(mesh, {5, 3, 9}, DType::F64, {Shard(0), Replicate(), Shard(2)},
                     {Shard(0), Replicate(), Shard(1)});
    check_transition(mesh, {5, 3, 9}, DType::F64, {Shard(2), Partial(), Shard(2)},
                     {Replicate(), Shard(1), Shard(0)});
    check_transition(mesh, {5, 3, 9}, DType::F64, {Partial(), Shard(0), Partial()},
                     {Shard(2), Replicate(), Shard(2)});
  });
}

TEST_CASE(
    "redistribute plans: all-to-all for S(i)->S(j), no step when unchanged, nested shards "
    "regathered",
    "[redistribute][plan][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    using K = RedistributeStep::Kind;
    auto plan = [&](Placements s, Placements d) {
      return plan_redistribute(DTensorSpec(mesh, s, {8, 8}, DType::F32), d);
    };
    REQUIRE(plan({Shard(0), Shard(1)}, {Shard(0), Shard(1)}).empty());
    auto p = plan({Shard(0), Replicate()}, {Shard(1), Replicate()});
    REQUIRE(p.size() == 1);
    REQUIRE(p[0].kind == K::AllToAll);
    // S(0),S(0) -> R,S(0): mesh dim 1's shard is nested in mesh dim 0's, so it
    // is gathered first, then re-cut from the whole.
    p = plan({Shard(0), Shard(0)}, {Replicate(), Shard(0)});
    REQUIRE(p.size() == 3);
    REQUIRE(p[0].mesh_dim == 1);
    REQUIRE(p[0].kind == K::AllGather);
    REQUIRE(p[1].mesh_dim == 0);
    REQUIRE(p[1].kind == K::AllGather);
    REQUIRE(p[2].kind == K::LocalChunk);
    // S(0),S(1) -> R,S(1): the inner shard is on another dim; only mesh dim 0 moves.
    p = plan({Shard(0), Shard(1)}, {Replicate(), Shard(1)});
    REQUIRE(p.size() == 1);
    REQUIRE(p[0].kind == K::AllGather);
    p = plan({Partial(), Replicate()}, {Shard(0), Replicate()});
    REQUIRE(p.size() == 1);
    REQUIRE(p[0].kind == K::ReduceScatter);
  });
}

TEST_CASE("redistribute Partial(avg), Partial(max), Partial(min) reduce correctly P=3",
          "[redistribute][partial][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    const Tensor G = testing::integer_tensor({6, 4}, DType::F64, 3);
    // avg: rank r holds G + (r - 1) * 6: the mean is G.
    Tensor a = G.clone();
    a.add_(Tensor::full({6, 4}, 6.0 * (ctx.rank - 1), DType::F64));
    auto avg = DTensor::from_local(a, mesh, {Partial(ReduceOp::Avg)}, Shape{6, 4});
    REQUIRE(max_abs_diff(avg.full_tensor(), G) == 0.0);
    // max: rank r holds G - r, the max is G (rank 0); min: G + r -> G.
    Tensor m = G.clone();
    m.add_(Tensor::full({6, 4}, -ctx.rank, DType::F64));
    auto mx = DTensor::from_local(m, mesh, {Partial(ReduceOp::Max)}, Shape{6, 4});
    REQUIRE(max_abs_diff(mx.redistribute(mesh, {Shard(0)}).to_local(),
                         G.narrow(0, 2 * ctx.rank, 2)) == 0.0);
    Tensor n = G.clone();
    n.add_(Tensor::full({6, 4}, ctx.rank, DType::F64));
    auto mn = DTensor::from_local(n, mesh, {Partial(ReduceOp::Min)}, Shape{6, 4});
    REQUIRE(max_abs_diff(mn.full_tensor(), G) == 0.0);
  });
}

TEST_CASE("redistribute round trips through every placement give back the original exactly P=4",
          "[redistribute][roundtrip][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const Tensor G = Tensor::rand({9, 11, 5}, DType::F32, 99);  // not integers: bits must survive
    DTensor x = distribute_tensor(G, mesh, {Shard(2), Shard(0)});
    DTensor cur = x;
    const std::vector<Placements> chain = {{Shard(0), Shard(0)},       {Replicate(), Shard(1)},
                                           {Shard(1), Shard(2)},       {Replicate(), Replicate()},
                                           {Partial(), Replicate()},   {Shard(2), Partial()},
                                           {Replicate(), Replicate()}, {Shard(2), Shard(0)}};
    for (const auto& p : chain)
      cur = cur.redistribute(mesh, p);
    REQUIRE(max_abs_diff(cur.to_local(), x.to_local()) == 0.0);
  });
}

TEST_CASE("redistribute errors: placement count, dim out of range, another mesh",
          "[redistribute][errors][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    DTensor x = distribute_tensor(Tensor::rand({4, 4}, DType::F32, 1), mesh, {Shard(0)});
    REQUIRE_THROWS_AS(x.redistribute(mesh, {Shard(0), Replicate()}), InvalidArgument);
    REQUIRE_THROWS_AS(x.redistribute(mesh, {Shard(2)}), InvalidArgument);
    DeviceMesh other(DeviceType::CPU, {1}, {0});
    REQUIRE_THROWS_AS(x.redistribute(other, {Replicate()}), InvalidArgument);
  });
}

TEST_CASE("redistribute with ranks disagreeing on the target fails on every rank, no hang P=3",
          "[redistribute][errors][agreement][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    DTensor x = distribute_tensor(Tensor::rand({6, 6}, DType::F32, 1), mesh, {Shard(0)});
    const Placements target = ctx.rank == 1 ? Placements{Shard(1)} : Placements{Replicate()};
    try {
      x.redistribute(mesh, target);
      FAIL("expected a disagreement error");
    } catch (const InvalidArgument& e) {
      REQUIRE(std::string(e.what()).find("disagree") != std::string::npos);
    }
  });
}

TEST_CASE(
    "a small Partial -> Replicate posts its sums with its agreement check: exact, and a "
    "disagreement fails on every rank while later calls stay exact P=3",
    "[redistribute][errors][agreement][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    // Rank q holds q + 1 + i / 8 at i: the sum over ranks is 6 + 3 i / 8.
    const auto partial = [&] {
      Tensor t = Tensor::empty({4, 6}, DType::F64);
      for (std::int64_t i = 0; i < 24; ++i)
        t.data<double>()[i] = ctx.rank + 1 + static_cast<double>(i) / 8;
      return DTensor::from_local(t, mesh, {Partial()});
    };
    const auto check_sum = [&](const DTensor& r) {
      REQUIRE(r.placements() == Placements{Replicate()});
      for (std::int64_t i = 0; i < 24; ++i)
        REQUIRE(r.to_local().item_flat(i) == 6.0 + 3.0 * static_cast<double>(i) / 8);
    };
    const DTensor p = partial();
    const auto sent = ctx.pg->counters().bytes_sent.load();
    check_sum(p.redistribute(mesh, {Replicate()}));
    // One round of messages: the 192 bytes to each peer and the 24-byte
    // checks, nothing else.
    CHECK(ctx.pg->counters().bytes_sent.load() - sent == 2 * (192 + 24));
    for (int attempt = 0; attempt < 2; ++attempt) {
      // Rank 1 asks for a shard of the sum: a reduce-scatter, which waits for
      // the check; the others have posted their sums already.
      const Placements target = ctx.rank == 1 ? Placements{Shard(0)} : Placements{Replicate()};
      try {
        partial().redistribute(mesh, target);
        FAIL("expected a disagreement error");
      } catch (const InvalidArgument& e) {
        REQUIRE_THAT(std::string(e.what()), Catch::Contains("redistribute: ranks disagree"));
      }
      check_sum(partial().redistribute(mesh, {Replicate()}));
    }
  });
}

TEST_CASE("redistribute disagreement with DTENSOR_DEBUG=1 lists every rank's arguments P=2",
          "[redistribute][errors][agreement][mp]") {
  testing::RunOptions o;
  o.env.emplace("DTENSOR_DEBUG", "1");
  run_ranks(
      2,
      [](RankContext& ctx) {
        DeviceMesh mesh(DeviceType::CPU, {2});
        DTensor x = distribute_tensor(Tensor::rand({6, 6}, DType::F32, 1), mesh, {Shard(0)});
        try {
          x.redistribute(mesh, ctx.rank == 0 ? Placements{Shard(1)} : Placements{Replicate()});
          FAIL("expected a disagreement error");
        } catch (const InvalidArgument& e) {
          const std::string m = e.what();
          REQUIRE(m.find("rank 0: ") != std::string::npos);
          REQUIRE(m.find("-> [S(1)]") != std::string::npos);
          REQUIRE(m.find("-> [R]") != std::string::npos);
        }
      },
      o);
}

TEST_CASE("from_local derives uneven global shapes and rejects shards that break the chunk rule",
          "[dtensor][from_local][mp]") {
  run_ranks(4, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    // 10 rows over mesh dim 0 (5,5), then 5 over mesh dim 1 (3,2): nested S(0),S(0).
    const std::int64_t rows = ctx.rank % 2 == 0 ? 3 : 2;
    auto x = DTensor::from_local(Tensor::zeros({rows, 3}, DType::F32), mesh, {Shard(0), Shard(0)});
    REQUIRE(x.shape() == Shape{10, 3});
    auto y = DTensor::from_local(Tensor::zeros({2, 3 + (ctx.rank % 2 == 0)}, DType::F32), mesh,
                                 {Replicate(), Shard(1)});
    REQUIRE(y.shape() == Shape{2, 7});
    // Even ranks claim 3 columns where 7 over 2 gives 4 then 3: shapes don't fit.
    const std::int64_t bad_cols = ctx.rank % 2 == 0 ? 3 : 4;
    REQUIRE_THROWS_AS(DTensor::from_local(Tensor::zeros({2, bad_cols}, DType::F32), mesh,
                                          {Replicate(), Shard(1)}),
                      InvalidArgument);
  });
}

TEST_CASE("distribute_tensor from a non-zero source sends each rank only its part P=3",
          "[dtensor][distribute][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    const Tensor G = Tensor::rand({7, 5}, DType::F64, 5);
    auto before = ctx.pg->counters().bytes_received.load();
    DTensor x = distribute_tensor(ctx.rank == 2 ? G : Tensor(), mesh, {Shard(0)}, /*src=*/2);
    auto got = ctx.pg->counters().bytes_received.load() - before;
    const auto [off, len] = testing::oracle_chunk(7, 3, ctx.rank);
    REQUIRE(max_abs_diff(x.to_local(), G.narrow(0, off, len)) == 0.0);
    if (ctx.rank != 2) {
      // Its part plus the small shape/dtype broadcast, nothing more.
      REQUIRE(got >= static_cast<std::uint64_t>(len * 5 * 8));
      REQUIRE(got <= static_cast<std::uint64_t>(len * 5 * 8 + 256));
    }
  });
}

TEST_CASE("reduce_partials buckets pending sums: same values as redistribute, fewer all-reduces",
          "[redistribute][bucket][mp]") {
  run_ranks(4, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    std::vector<DTensor> grads;
    std::vector<Tensor> sums;
    // Ten small Partial(sum) tensors over mesh dim 0, replicated on mesh dim 1,
    // plus one already replicated and one sharded on mesh dim 1.
    for (int k = 0; k < 10; ++k) {
      const Shape s{3 + k, 4};
      const Tensor G = testing::integer_tensor(s, DType::F64, 50 + k);
      sums.push_back(G);
      grads.push_back(
          DTensor::from_local(testing::oracle_local(G, mesh.shape(), {Partial(), Replicate()},
                                                    *mesh.get_coordinate(), {true, true}),
                              mesh, {Partial(), Replicate()}, s));
    }
    const Tensor R = testing::integer_tensor({5}, DType::F64, 70);
    grads.push_back(distribute_tensor(R, mesh, {Replicate(), Replicate()}));
    const Tensor S = testing::integer_tensor({6, 2}, DType::F64, 71);
    grads.push_back(
        DTensor::from_local(testing::oracle_local(S, mesh.shape(), {Partial(), Shard(0)},
                                                  *mesh.get_coordinate(), {true, true}),
                            mesh, {Partial(), Shard(0)}, Shape{6, 2}));
    const auto before = mesh.get_group(0)->counters().messages_sent.load();
    auto reduced = reduce_partials(grads, 1 << 10);  // 1 KiB buckets: several buckets
    const auto bucketed_msgs = mesh.get_group(0)->counters().messages_sent.load() - before;
    for (int k = 0; k < 10; ++k) {
      REQUIRE(reduced[k].placements() == Placements{Replicate(), Replicate()});
      REQUIRE(max_abs_diff(reduced[k].to_local(), sums[k]) == 0.0);
    }
    REQUIRE(reduced[10].to_local().shares_storage_with(grads[10].to_local()));  // untouched
    REQUIRE(reduced[11].placements() == Placements{Replicate(), Shard(0)});
    REQUIRE(max_abs_diff(reduced[11].full_tensor(), S) == 0.0);
    const auto before_each = mesh.get_group(0)->counters().messages_sent.load();
    for (int k = 0; k < 10; ++k)
      grads[k].redistribute(mesh, {Replicate(), Replicate()});
    const auto each_msgs = mesh.get_group(0)->counters().messages_sent.load() - before_each;
    REQUIRE(bucketed_msgs < each_msgs);
    (void)ctx;
  });
}

TEST_CASE("redistribute: a mesh dim of one rank takes no step and copies nothing P=2",
          "[redistribute][plan][mp]") {
  run_ranks(2, [](RankContext& ctx) {
    // One rank alone: any change is free, and the local tensor is the same memory.
    const DeviceMesh own(DeviceType::CPU, {1}, {ctx.rank});
    for (const auto& s : kPlacements)
      for (const auto& d : kPlacements)
        if (!is_error_pair({s}, {d}))
          REQUIRE(plan_redistribute(DTensorSpec(own, {s}, {6, 4}, DType::F64), {d}).empty());
    Tensor whole = Tensor::full({6, 4}, 2.0, DType::F64);
    const DTensor a = DTensor::from_local(whole, own, {Shard(1)});
    const DTensor b = a.redistribute(own, {Shard(0)});
    CHECK(b.placements() == Placements{Shard(0)});
    CHECK(b.to_local().data_ptr() == whole.data_ptr());
    // 1x2 and 2x1: the trivial dim never appears in a plan, and every pair of
    // placements (nested shards too) still gives the oracle's shards.
    for (const Shape& shape : {Shape{1, 2}, Shape{2, 1}}) {
      DeviceMesh mesh(DeviceType::CPU, shape);
      const std::int64_t trivial = shape[0] == 1 ? 0 : 1;
      for (const auto& s0 : kPlacements)
        for (const auto& s1 : kPlacements)
          for (const auto& d0 : kPlacements)
            for (const auto& d1 : kPlacements) {
              const Placements src{s0, s1}, dst{d0, d1};
              if (is_error_pair(src, dst)) continue;
              for (const auto& step :
                   plan_redistribute(DTensorSpec(mesh, src, {10, 7}, DType::F64), dst))
                CHECK(step.mesh_dim != trivial);
              check_transition(mesh, {10, 7}, DType::F64, src, dst);
            }
    }
  });
}
