// The example plugin (examples/plugin): loaded at run time on 4 ranks, its
// operator runs through its handler (with communication) and through the
// default path, against a single-process cumulative sum.
#include <catch2/catch.hpp>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/plugin.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {
Tensor cumsum_oracle(const Tensor& x, std::int64_t dim) {
  Tensor out = x.clone();
  for (std::int64_t i = 0; i < x.size(0); ++i)
    for (std::int64_t j = 0; j < x.size(1); ++j) {
      double acc = 0;
      if (dim == 1)
        for (std::int64_t k = 0; k <= j; ++k)
          acc += x.item({i, k});
      else
        for (std::int64_t k = 0; k <= i; ++k)
          acc += x.item({k, j});
      out.data<double>()[i * x.size(1) + j] = acc;
    }
  return out;
}
}  // namespace

TEST_CASE("plugin example::cumsum loads at run time and matches one process on a 2x2 mesh P=4",
          "[plugin][mp]") {
#ifndef DTENSOR_EXAMPLE_PLUGIN
  WARN("skipped: the examples (and so the plugin) are not built");
  return;
#else
  run_ranks(4, [](RankContext& ctx) {
    REQUIRE_FALSE(has_op("example::cumsum"));
    load_plugin(DTENSOR_EXAMPLE_PLUGIN);
    load_plugin(DTENSOR_EXAMPLE_PLUGIN);  // a second load is a no-op
    REQUIRE(has_op("example::cumsum"));
    REQUIRE(loaded_plugins().size() == 1);
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const Tensor X = Tensor::rand({7, 11}, DType::F64, 3);
    // The scanned dim is sharded: the handler's communicating path.
    auto x = distribute_tensor(X, mesh, {Shard(0), Shard(1)});
    const auto sent = ctx.pg->counters().bytes_sent.load();
    auto y = dispatch("example::cumsum", {x, std::int64_t{1}}).at(0);
    REQUIRE(ctx.pg->counters().bytes_sent.load() > sent);
    REQUIRE(y.placements() == x.placements());
    REQUIRE(max_abs_diff(y.full_tensor(), cumsum_oracle(X, 1)) < 1e-13);
    // Scanning dim 0 with dim 0 and dim 1 sharded: also the handler (only one mesh dim shards 0).
    REQUIRE(max_abs_diff(dispatch("example::cumsum", {x, std::int64_t{0}}).at(0).full_tensor(),
                         cumsum_oracle(X, 0)) < 1e-13);
    // Nested shards of the scanned dim: the default path redistributes first.
    auto n = distribute_tensor(X, mesh, {Shard(1), Shard(1)});
    auto z = dispatch("example::cumsum", {n, std::int64_t{-1}}).at(0);
    REQUIRE_FALSE(z.placements()[0].is_shard(1));
    REQUIRE(max_abs_diff(z.full_tensor(), cumsum_oracle(X, 1)) < 1e-13);
  });
#endif
}

TEST_CASE("load_plugin errors name the path", "[plugin][errors]") {
  try {
    load_plugin("/nonexistent/libnothing.so");
    FAIL("expected an error");
  } catch (const InvalidArgument& e) {
    REQUIRE(std::string(e.what()).find("/nonexistent/libnothing.so") != std::string::npos);
  }
  // A shared library without the entry point: libdtensor itself.
  try {
    load_plugin("/proc/self/exe");
    FAIL("expected an error");
  } catch (const InvalidArgument& e) {
    REQUIRE(std::string(e.what()).find("load_plugin") != std::string::npos);
  }
}
