// Plugins and overrides: a registration that fails halfway keeps nothing; a
// plugin loaded on some ranks only is caught on every rank as a desync; an
// override of a built-in operator can call the handler it replaces.
#include <catch2/catch.hpp>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/plugin.h"
#include "dtensor/ops/pointwise.h"
#include "tests/support/multiprocess.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

TEST_CASE("plugin registration is all or nothing", "[plugin][registration]") {
  REQUIRE(has_op("convolution"));
  const auto before = registered_ops();
  try {
    load_plugin(DTENSOR_FAILING_PLUGIN);
    FAIL("expected the registration to fail");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("nothing it registered was kept") && Catch::Contains("convolution"));
  }
  CHECK_FALSE(has_op("test::half_registered"));
  CHECK(registered_ops() == before);
  CHECK(loaded_plugins().empty());
}

TEST_CASE("a plugin loaded on some ranks only makes the next call fail on every rank P=2",
          "[plugin][desync][mp]") {
  run_ranks(2, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const DTensor x = distribute_tensor(Tensor::rand({4, 4}, DType::F64, 1), mesh, {Shard(0)});
    if (ctx.rank == 0) load_plugin(DTENSOR_EXAMPLE_PLUGIN);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      add(x, x);
      FAIL("expected a disagreement");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("ranks disagree"));
    }
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  });
}

TEST_CASE("an override of a built-in handler calls the handler it replaces P=2",
          "[plugin][override][mp]") {
  run_ranks(2, [](RankContext&) {
    HandlerOptions opts;
    const auto builtin = current_handler("convolution", &opts);
    REQUIRE(builtin);
    int calls = 0;
    register_op_handler(
        "convolution",
        [builtin, &calls](OpCall& call) {
          ++calls;
          return (*builtin)(call);
        },
        /*override_existing=*/true, opts);
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor X = Tensor::rand({1, 2, 9, 7}, DType::F64, 1);
    const Tensor W = Tensor::rand({3, 2, 3, 3}, DType::F64, 2);
    const ConvParams p{{1}, {{1, 1}}, {1}, 1};
    const DTensor y = convolution(distribute_tensor(X, mesh, {Shard(3)}),
                                  distribute_tensor(W, mesh, {Replicate()}), std::nullopt, p);
    CHECK(calls == 1);
    CHECK(max_abs_diff(y.full_tensor(), reference::ref_conv_forward(X, W, Tensor(), p)) < 1e-12);
    // Without override_existing the replacement is refused.
    CHECK_THROWS_AS(register_op_handler("convolution", *builtin), InvalidArgument);
    register_op_handler("convolution", *builtin, true, opts);  // put the built-in back
  });
}
