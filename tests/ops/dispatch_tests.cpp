// The dispatch seam: the default path, the propagation cache, strategy choice
// with redistribution, registration rules, handlers and error cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/op_schema.h"
#include "dtensor/ops/pointwise.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

// A user operator "test::axpy"(x, y, a) = a*x + y, registered like a user would.
void register_axpy(bool with_kernel = true) {
  OpDef def;
  def.name = "test::axpy";
  def.validate = [](const OpSchema& s) {
    check_arg(s.dtensor(0).shape() == s.dtensor(1).shape(), "test", "test::axpy: shapes differ");
  };
  def.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  def.signatures = [](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
      sigs.push_back({{Shard(d), Shard(d)}, {Shard(d)}});
    sigs.push_back({{Replicate(), Replicate()}, {Replicate()}});
    return sigs;
  };
  register_op(def, /*override_existing=*/true);
  if (with_kernel)
    register_kernel(
        "test::axpy", DeviceType::CPU, DType::F64,
        [](const KernelCall& c) {
          Tensor out = c.local(0).clone();
          const double a = c.schema.scalar(2);
          for (std::int64_t i = 0; i < out.numel(); ++i)
            out.data<double>()[i] = a * out.data<double>()[i] + c.local(1).item_flat(i);
          return std::vector<Tensor>{out};
        },
        /*override_existing=*/true);
}

Tensor axpy_oracle(const Tensor& x, const Tensor& y, double a) {
  Tensor out = Tensor::empty(x.shape(), DType::F64);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    out.data<double>()[i] = a * x.item_flat(i) + y.item_flat(i);
  return out;
}

}  // namespace

TEST_CASE("dispatch default path runs a user operator's kernel on matching shards, no traffic P=3",
          "[dispatch][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    register_axpy();
    DeviceMesh mesh(DeviceType::CPU, {3});
    const Tensor X = Tensor::rand({7, 5}, DType::F64, 1), Y = Tensor::rand({7, 5}, DType::F64, 2);
    auto x = distribute_tensor(X, mesh, {Shard(0)});
    auto y = distribute_tensor(Y, mesh, {Shard(0)});
    reset_dispatch_stats();
    const auto sent = ctx.pg->counters().bytes_sent.load();
    auto out = dispatch("test::axpy", {x, y, 2.0}).at(0);
    REQUIRE(out.placements() == Placements{Shard(0)});
    REQUIRE(dispatch_stats().inputs_redistributed == 0);
    // Only the agreement check's all-gather (24 bytes per rank) crossed the wire.
    REQUIRE(ctx.pg->counters().bytes_sent.load() - sent <= 2 * 24);
    REQUIRE(max_abs_diff(out.full_tensor(), axpy_oracle(X, Y, 2.0)) < 1e-15);
  });
}

TEST_CASE("dispatch caches propagation: the second identical call is a counted hit P=2",
          "[dispatch][cache][mp]") {
  run_ranks(2, [](RankContext&) {
    register_axpy();
    clear_propagation_cache();
    reset_dispatch_stats();
    DeviceMesh mesh(DeviceType::CPU, {2});
    auto x = distribute_tensor(Tensor::rand({4, 4}, DType::F64, 1), mesh, {Shard(1)});
    dispatch("test::axpy", {x, x, 1.0});
    REQUIRE(dispatch_stats().cache_misses == 1);
    REQUIRE(dispatch_stats().cache_hits == 0);
    dispatch("test::axpy", {x, x, 1.0});
    REQUIRE(dispatch_stats().cache_hits == 1);
    // Another scalar or another placement is another key.
    dispatch("test::axpy", {x, x, 3.0});
    auto r = x.redistribute(mesh, {Replicate()});
    dispatch("test::axpy", {r, r, 1.0});
    REQUIRE(dispatch_stats().cache_misses == 3);
    REQUIRE(dispatch_stats().calls == 4);
  });
}

TEST_CASE("dispatch picks the cheapest strategy and redistributes only what it must P=4",
          "[dispatch][strategy][mp]") {
  run_ranks(4, [](RankContext&) {
    register_axpy();
    DeviceMesh mesh(DeviceType::CPU, {4});
    const Tensor X = Tensor::rand({8, 12}, DType::F64, 1), Y = Tensor::rand({8, 12}, DType::F64, 2);
    // x is S(1), y replicated: cutting y locally to S(1) costs nothing on the
    // wire, gathering x would cost 3/4 of it: the propagator cuts y.
    auto x = distribute_tensor(X, mesh, {Shard(1)});
    auto y = distribute_tensor(Y, mesh, {Replicate()});
    const auto& s = propagate(OpSchema("test::axpy", {x, y, 1.5}));
    REQUIRE(s.output_specs[0].placements() == Placements{Shard(1)});
    REQUIRE(s.input_specs[1].placements() == Placements{Shard(1)});
    REQUIRE(s.needs_redistribute);
    reset_dispatch_stats();
    auto out = dispatch("test::axpy", {x, y, 1.5}).at(0);
    REQUIRE(dispatch_stats().inputs_redistributed == 1);
    REQUIRE(max_abs_diff(out.full_tensor(), axpy_oracle(X, Y, 1.5)) < 1e-15);
    // S(0) + S(1): one of them moves with an all-to-all, to S(0) by the tie-break.
    auto x0 = distribute_tensor(X, mesh, {Shard(0)});
    const auto& s2 = propagate(OpSchema("test::axpy", {x0, x, 1.0}));
    REQUIRE(s2.output_specs[0].placements() == Placements{Shard(0)});
    REQUIRE(max_abs_diff(dispatch("test::axpy", {x0, x, 1.0}).at(0).full_tensor(),
                         axpy_oracle(X, X, 1.0)) < 1e-15);
  });
}

TEST_CASE("registering twice is an error unless overriding, the override is what runs",
          "[dispatch][registry]") {
  OpDef def;
  def.name = "test::dup";
  register_op(def, true);
  REQUIRE_THROWS_AS(register_op(def), InvalidArgument);
  REQUIRE_NOTHROW(register_op(def, /*override_existing=*/true));
  auto k = [](const KernelCall&) { return std::vector<Tensor>{}; };
  register_kernel("test::dup", DeviceType::CPU, DType::F32, k, true);
  REQUIRE_THROWS_AS(register_kernel("test::dup", DeviceType::CPU, DType::F32, k), InvalidArgument);
  REQUIRE_NOTHROW(register_kernel("test::dup", DeviceType::CPU, DType::F64, k));
  auto h = [](OpCall&) { return std::vector<DTensor>{}; };
  register_op_handler("test::dup", h, true);
  try {
    register_op_handler("test::dup", h);
    FAIL("expected an error");
  } catch (const InvalidArgument& e) {
    REQUIRE(std::string(e.what()).find("test::dup") != std::string::npos);
  }
  REQUIRE(has_op("test::dup"));
  unregister_op("test::dup");
  REQUIRE_FALSE(has_op("test::dup"));
  REQUIRE(has_op("add"));
  REQUIRE(has_op("relu_backward"));
}

TEST_CASE("a custom handler replaces the default path and can reuse its parts P=2",
          "[dispatch][handler][mp]") {
  run_ranks(2, [](RankContext&) {
    register_axpy();
    int handled = 0;
    register_op_handler(
        "test::axpy",
        [&handled](OpCall& call) {
          ++handled;
          // A handler sees the propagator's answer and may run the default path.
          REQUIRE(call.has_strategies());
          REQUIRE(call.sharding().output_specs.size() == 1);
          auto outs = call.run_default();
          return std::vector<DTensor>{scale(outs[0], 2.0)};
        },
        true);
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor X = Tensor::rand({6, 3}, DType::F64, 7);
    auto x = distribute_tensor(X, mesh, {Shard(0)});
    auto out = dispatch("test::axpy", {x, x, 1.0}).at(0);
    REQUIRE(handled == 1);
    REQUIRE(max_abs_diff(out.full_tensor(), axpy_oracle(X, X, 3.0)) < 1e-15);  // 2(x + x) = 3x + x
    REQUIRE(dispatch_stats().handler_calls >= 1);
  });
}

TEST_CASE("dispatch errors name the operator: unknown op, missing kernel, bad arguments P=2",
          "[dispatch][errors][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    auto x = distribute_tensor(Tensor::rand({4, 4}, DType::F64, 1), mesh, {Shard(0)});
    auto f = distribute_tensor(Tensor::rand({4, 4}, DType::F32, 1), mesh, {Shard(0)});
    auto small = distribute_tensor(Tensor::rand({2, 4}, DType::F64, 1), mesh, {Shard(0)});
    auto msg = [](auto fn) {
      try {
        fn();
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    REQUIRE(msg([&] { dispatch("no::such_op", {x}); }).find("unknown operator 'no::such_op'") !=
            std::string::npos);
    register_axpy(/*with_kernel=*/false);
    unregister_op("test::axpy");
    register_axpy(/*with_kernel=*/false);
    const auto missing = msg([&] { dispatch("test::axpy", {f, f, 1.0}); });
    REQUIRE(missing.find("'test::axpy' has no kernel for cpu f32") != std::string::npos);
    REQUIRE_THROWS_AS(dispatch("test::axpy", {f, f, 1.0}), NotSupported);
    REQUIRE(msg([&] { add(x, small); }).find("add: shapes") != std::string::npos);
    REQUIRE(msg([&] { add(x, f); }).find("add: dtypes") != std::string::npos);
    REQUIRE(msg([&] {
              dispatch("scale", {x, std::string("two")});
            }).find("argument 1") != std::string::npos);
    DeviceMesh other(DeviceType::CPU, {2}, {0, 1});
    auto y = distribute_tensor(Tensor::rand({4, 4}, DType::F64, 1), other, {Shard(0)});
    REQUIRE_NOTHROW(add(x, y));  // equal meshes are the same mesh
  });
}

TEST_CASE("the propagation cache's key tells every argument apart, exactly", "[dispatch]") {
  const auto key = [](std::vector<OpArg> args) { return OpSchema("op", std::move(args)).key(); };
  const auto same = [&](std::vector<OpArg> a, std::vector<OpArg> b) {
    const OpSchemaKey ka = key(std::move(a)), kb = key(std::move(b));
    return ka == kb && OpSchemaKeyHash()(ka) == OpSchemaKeyHash()(kb);
  };
  CHECK(same({std::int64_t{3}, 0.5, std::string("tanh"), IntList{1, 2}, None{}},
             {std::int64_t{3}, 0.5, std::string("tanh"), IntList{1, 2}, None{}}));
  // Kinds: an int, a double and a bool of the same value differ.
  CHECK_FALSE(same({std::int64_t{1}}, {1.0}));
  CHECK_FALSE(same({std::int64_t{1}}, {true}));
  // Doubles by their bits: one ulp apart, and -0 against +0.
  CHECK_FALSE(same({0.1}, {std::nextafter(0.1, 1.0)}));
  CHECK_FALSE(same({0.0}, {-0.0}));
  // Lists and strings by length and content: no two concatenate alike.
  CHECK_FALSE(same({IntList{1, 2}, IntList{}}, {IntList{1}, IntList{2}}));
  CHECK_FALSE(same({std::string("ab"), std::string("c")}, {std::string("a"), std::string("bc")}));
  CHECK_FALSE(same({std::string("abcdefgh")}, {std::string("abcdefgh\0", 9)}));
  CHECK_FALSE(same({std::string("abcdefghi")}, {std::string("abcdefghj")}));
  // Tensors by dtype, device and shape (not values).
  CHECK(same({Tensor::zeros({2, 3}, DType::F32)}, {Tensor::full({2, 3}, 1.0, DType::F32)}));
  CHECK_FALSE(same({Tensor::zeros({2, 3}, DType::F32)}, {Tensor::zeros({3, 2}, DType::F32)}));
  CHECK_FALSE(same({Tensor::zeros({2, 3}, DType::F32)}, {Tensor::zeros({2, 3}, DType::F64)}));
  CHECK_FALSE(same({Tensor()}, {Tensor::zeros({}, DType::F32)}));
}
