// Agreement checks inside backward(): the check of a call that does not
// communicate is confirmed later (ops/deferred_agreement.h). A disagreement
// there must still be raised on every rank, by backward(), naming the call,
// before any leaf's gradient is written; the calls after it must pair with
// their peers as before; outside backward() nothing changes.
#include <catch2/catch.hpp>
#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

// Set by the backward below once its disagreeing call has returned: with the
// check confirmed at that call, it would have thrown instead.
bool g_passed_the_disagreement = false;

// skewed(x) = x, whose backward scales the gradient by a factor that differs
// between ranks: a call the ranks disagree on, made by backward().
void register_skewed() {
  if (has_op("test_skewed")) return;
  OpDef d;
  d.name = "test_skewed";
  d.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  d.signatures = [](const OpSchema&) {
    return std::vector<ShardingSignature>{{{Shard(0)}, {Shard(0)}}};
  };
  d.backward = [](const BackwardCall& c) -> std::vector<std::optional<DTensor>> {
    const DTensor g = scale(*c.grad_outputs[0], get_rank() == 0 ? 2.0 : 2.5);
    g_passed_the_disagreement = true;
    return {mul(g, c.forward.dtensor(0))};
  };
  register_op(d);
  register_kernel("test_skewed", DeviceType::CPU, DType::F64,
                  [](const KernelCall& k) { return std::vector<Tensor>{k.local(0).clone()}; });
}

void require_disagreement(const std::function<void()>& call, const std::string& op) {
  try {
    call();
    FAIL("expected a disagreement error");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(std::string(e.what()), Catch::Contains(op + ": ranks disagree"));
  }
}

}  // namespace

DTENSOR_TEST_CASE(
    "inside backward a disagreement at a call that does not communicate is raised by backward on "
    "every rank, naming the call, before any gradient is written, and later calls are exact",
    "[autograd][agreement]", 2) {
  register_skewed();
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = distribute_tensor(Tensor::rand({6, 3}, DType::F64, 3), mesh, {Shard(0)});
  x.requires_grad_();

  // Outside backward() the same call fails at once.
  require_disagreement([&] { scale(x.detach(), get_rank() == 0 ? 2.0 : 2.5); }, "scale");

  for (int attempt = 0; attempt < 2; ++attempt) {
    g_passed_the_disagreement = false;
    DTensor y = dispatch("test_skewed", {x}).at(0);
    // Calls after the disagreement communicate (sum's reduction) and run
    // before backward() raises it.
    require_disagreement([&] { backward(sum(mul(y, y))); }, "scale");
    REQUIRE(g_passed_the_disagreement);   // confirmed later, not at the call
    REQUIRE_FALSE(x.grad().has_value());  // nothing written
  }

  // The checks still pair with the peers': a backward of agreed calls is exact.
  const Tensor X = x.full_tensor().clone();
  backward(sum(mul(x, x)));
  const Tensor g = x.grad()->full_tensor();
  for (std::int64_t i = 0; i < X.numel(); ++i)
    CHECK(std::abs(g.item_flat(i) - 2 * X.item_flat(i)) < 1e-12);
}
