// The convolution handlers post their halo exchange before the call's
// agreement check is confirmed (the check travels with it). A rank asked
// something else must make every rank throw the disagreement, even when its
// halo messages have other sizes (had they met the others' receives, the
// transport would have had to reject them), and nothing of a failed call may
// meet a later call's messages.
#include <catch2/catch.hpp>
#include <optional>

#include "dtensor/dtensor.h"
#include "tests/conv/conv_case.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

ConvParams same_padding(std::int64_t kw) {
  return ConvParams{{1, 1}, {{1, 1}, {(kw - 1) / 2, kw - 1 - (kw - 1) / 2}}, {1, 1}, 1};
}

void require_disagreement(const std::function<void()>& call) {
  try {
    call();
    FAIL("expected a disagreement error");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("ranks disagree"));
  }
}

}  // namespace

TEST_CASE(
    "conv whose ranks disagree on the halo width fails on every rank and later calls are exact "
    "P=3",
    "[conv][agreement][mp]") {
  run_ranks(3, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    // Rank 1 has a 5-wide kernel (2-column halos), the others a 3-wide one.
    const std::int64_t kw = ctx.rank == 1 ? 5 : 3;
    auto x = distribute_tensor(Tensor::rand({1, 2, 4, 12}, DType::F64, 1), mesh, {Shard(3)});
    // Wrapped without from_local, which would itself catch the disagreement.
    auto w = DTensor(Tensor::rand({3, 2, 3, kw}, DType::F64, 2),
                     DTensorSpec(mesh, {Replicate()}, Shape{3, 2, 3, kw}, DType::F64));
    auto gy = distribute_tensor(Tensor::rand({1, 3, 4, 12}, DType::F64, 3), mesh, {Shard(3)});
    for (int attempt = 0; attempt < 2; ++attempt) {
      require_disagreement([&] { convolution(x, w, std::nullopt, same_padding(kw)); });
      require_disagreement([&] {
        convolution_backward(gy, x, w, same_padding(kw), ConvOutputMask{true, true, false});
      });
      require_disagreement([&] {
        convolution_backward(gy, x, w, same_padding(kw), ConvOutputMask{true, false, false});
      });
    }
    // The same shapes, now agreed on: exact against the oracle, twice.
    for (std::int64_t k : {3, 5}) {
      ConvCase c;
      c.input = {1, 2, 4, 12};
      c.out_channels = 3;
      c.kernel = {3, k};
      c.params = same_padding(k);
      c.mesh = {3};
      c.input_placements = {Shard(3)};
      c.seed = 5;
      check_conv_case(c);
    }
  });
}
