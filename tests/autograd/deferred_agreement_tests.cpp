// Agreement checks inside backward() and a module's call: the check of a
// call that does not communicate is confirmed later
// (dtensor/ops/deferred_agreement.h). A disagreement there must still be
// raised on every rank, by backward() or the module's call, naming the
// call, before any leaf's gradient is written or the module's output
// returned; the calls after it must pair with their peers as before;
// elsewhere nothing changes.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/nn/module.h"
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
  d.signatures = [](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    for (std::int64_t k = 0; k < s.dtensor(0).ndim(); ++k)
      sigs.push_back({{Shard(k)}, {Shard(k)}});
    return sigs;
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

// A user module whose forward makes a call the ranks may disagree on (a
// scale by a factor that then differs between ranks; it communicates
// nothing), then a convolution, which exchanges a halo.
class ScaleThenConv : public nn::Module {
 public:
  ScaleThenConv(DTensor w, bool skewed) : w_(std::move(w)), skewed_(skewed) {}
  DTensor forward(const DTensor& x) override {
    const DTensor s = scale(x, skewed_ && get_rank() == 0 ? 2.0 : 2.5);
    g_passed_the_disagreement = true;
    const ConvParams same{{1, 1}, {{1, 1}, {1, 1}}, {1, 1}, 1};
    return convolution(s, w_, std::nullopt, same);
  }

 private:
  DTensor w_;
  bool skewed_;
};

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
  // x -> convolution (a halo along H) -> skewed -> sum: backward() runs the
  // skewed backward's disagreeing call first, then the convolution's
  // backward, which exchanges a halo, then raises.
  DTensor x = distribute_tensor(Tensor::rand({1, 1, 8, 5}, DType::F64, 3), mesh, {Shard(2)});
  DTensor w = distribute_tensor(Tensor::rand({1, 1, 3, 3}, DType::F64, 4), mesh, {Replicate()});
  x.requires_grad_();
  const ConvParams same{{1, 1}, {{1, 1}, {1, 1}}, {1, 1}, 1};

  // Outside backward() the same call fails at once.
  require_disagreement([&] { scale(x.detach(), get_rank() == 0 ? 2.0 : 2.5); }, "scale");

  for (int attempt = 0; attempt < 2; ++attempt) {
    g_passed_the_disagreement = false;
    DTensor y = dispatch("test_skewed", {convolution(x, w, std::nullopt, same)}).at(0);
    require_disagreement([&] { backward(sum(mul(y, y))); }, "scale");
    REQUIRE(g_passed_the_disagreement);   // confirmed later, not at the call
    REQUIRE_FALSE(x.grad().has_value());  // nothing written
  }

  // The checks still pair with the peers': a backward of agreed calls,
  // through the same convolution, is exact (d/dx sum(conv(x)^2) against a
  // naive f64 loop).
  const Tensor X = x.full_tensor().clone(), W = w.full_tensor().clone();
  backward(sum(mul(convolution(x, w, std::nullopt, same), convolution(x, w, std::nullopt, same))));
  const Tensor g = x.grad()->full_tensor();
  const std::int64_t H = 8, Wd = 5;
  auto at = [&](const Tensor& t, std::int64_t i, std::int64_t j) {
    return i < 0 || j < 0 || i >= H || j >= Wd ? 0.0 : t.item({0, 0, i, j});
  };
  std::vector<double> yv(H * Wd);
  for (std::int64_t i = 0; i < H; ++i)
    for (std::int64_t j = 0; j < Wd; ++j)
      for (std::int64_t a = 0; a < 3; ++a)
        for (std::int64_t b = 0; b < 3; ++b)
          yv[i * Wd + j] += W.item({0, 0, a, b}) * at(X, i + a - 1, j + b - 1);
  for (std::int64_t i = 0; i < H; ++i)
    for (std::int64_t j = 0; j < Wd; ++j) {
      double expect =
          0;  // sum over outputs (p, q) reading (i, j): 2 y[p, q] w[i - p + 1, j - q + 1]
      for (std::int64_t a = 0; a < 3; ++a)
        for (std::int64_t b = 0; b < 3; ++b) {
          const std::int64_t p = i - a + 1, q = j - b + 1;
          if (p >= 0 && q >= 0 && p < H && q < Wd)
            expect += 2 * yv[p * Wd + q] * W.item({0, 0, a, b});
        }
      CHECK(std::abs(g.item({0, 0, i, j}) - expect) < 1e-12);
    }
}

DTENSOR_TEST_CASE(
    "inside a module's call a disagreement at a call that does not communicate is raised by the "
    "call on every rank, naming the call, with no output, and later calls are exact",
    "[autograd][agreement][nn]", 2) {
  register_skewed();
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = distribute_tensor(Tensor::rand({1, 1, 8, 5}, DType::F64, 5), mesh, {Shard(2)});
  DTensor w = distribute_tensor(Tensor::rand({1, 1, 3, 3}, DType::F64, 6), mesh, {Replicate()});
  ScaleThenConv skewed(w, true), agreed(w, false);

  for (int attempt = 0; attempt < 2; ++attempt) {
    g_passed_the_disagreement = false;
    require_disagreement([&] { skewed(x); }, "scale");
    REQUIRE(g_passed_the_disagreement);  // confirmed when the module returns, not at the call
  }
  // Outside a module the same call fails at once.
  g_passed_the_disagreement = false;
  require_disagreement([&] { skewed.forward(x); }, "scale");
  REQUIRE_FALSE(g_passed_the_disagreement);

  // The checks still pair with the peers': the agreed module is exact
  // (conv(2.5 x) against a naive f64 loop, zero padding).
  const Tensor y = agreed(x).full_tensor();
  const Tensor X = x.full_tensor(), W = w.full_tensor();
  const std::int64_t H = 8, Wd = 5;
  for (std::int64_t i = 0; i < H; ++i)
    for (std::int64_t j = 0; j < Wd; ++j) {
      double expect = 0;
      for (std::int64_t a = 0; a < 3; ++a)
        for (std::int64_t b = 0; b < 3; ++b) {
          const std::int64_t p = i + a - 1, q = j + b - 1;
          if (p >= 0 && q >= 0 && p < H && q < Wd)
            expect += W.item({0, 0, a, b}) * 2.5 * X.item({0, 0, p, q});
        }
      CHECK(std::abs(y.item({0, 0, i, j}) - expect) < 1e-12);
    }
}

DTENSOR_TEST_CASE(
    "a loss's own check rides with its reduction: a disagreement at the loss call is raised on "
    "every rank naming the loss, and later losses are exact",
    "[autograd][agreement][losses]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor X = Tensor::rand({2, 3, 4}, DType::F64, 7),
               Y = Tensor::rand({2, 3, 4}, DType::F64, 8);
  DTensor x = distribute_tensor(X, mesh, {Shard(2)});
  DTensor y = distribute_tensor(Y, mesh, {Shard(2)});
  double sum = 0;
  for (std::int64_t i = 0; i < X.numel(); ++i)
    sum += (X.item_flat(i) - Y.item_flat(i)) * (X.item_flat(i) - Y.item_flat(i));
  for (int attempt = 0; attempt < 2; ++attempt) {
    // The ranks disagree on the reduction; the pending sums the loss leaves
    // have the same shape either way, so only the loss call's check sees it.
    require_disagreement(
        [&] { mse_loss(x, y, get_rank() == 0 ? LossReduction::Mean : LossReduction::Sum); },
        "mse_loss");
    CHECK(std::abs(mse_loss(x, y, LossReduction::Sum).to_local().item_flat(0) - sum) < 1e-12);
    CHECK(std::abs(mse_loss(x, y).to_local().item_flat(0) - sum / 24) < 1e-12);
  }
}
