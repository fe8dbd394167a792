// Autocast and the dtype conversion under it: which dtype each operator
// family runs in, that the casts are recorded (f32 parameters get f32
// gradients), nesting and suspension, and that the bf16 results stay within
// bf16's precision of an f64 run (the f64 path is checked against naive
// loops by the operators' own tests).
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;
using Catch::Contains;

namespace {

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0, scale = 0;
  for (std::int64_t k = 0; k < b.numel(); ++k)
    scale = std::max(scale, std::abs(b.item_flat(k)));
  for (std::int64_t k = 0; k < b.numel(); ++k)
    worst = std::max(worst, std::abs(a.item_flat(k) - b.item_flat(k)));
  return worst / std::max(scale, 1e-300);
}

ConvParams same_3x3() {
  ConvParams p;
  p.stride = {1, 1};
  p.dilation = {1, 1};
  p.padding = {{1, 1}, {1, 1}};
  return p;
}

}  // namespace

DTENSOR_TEST_CASE("to converts with every placement and converts the gradient back", "[autocast]",
                  2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor X = Tensor::rand({3, 5}, DType::F32, 1);
  for (const Placements& pl : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Replicate()},
                               Placements{Partial()}}) {
    INFO(placements_str(pl));
    DTensor x = pl[0].is_partial()
                    ? DTensor::from_local(
                          mesh.get_local_rank(0) == 0 ? X : Tensor::zeros({3, 5}, DType::F32), mesh,
                          pl, Shape{3, 5})
                    : distribute_tensor(X, mesh, pl);
    x.requires_grad_();
    const DTensor y = to(x, DType::BF16);
    CHECK(y.dtype() == DType::BF16);
    CHECK(y.placements() == pl);
    const Tensor Y = y.full_tensor();
    for (std::int64_t k = 0; k < Y.numel(); ++k)
      CHECK(std::abs(Y.item_flat(k) - X.item_flat(k)) <= std::ldexp(std::abs(X.item_flat(k)), -8));
    CHECK(to(x, DType::F32).to_local().data<float>() == x.to_local().data<float>());  // itself
    backward(sum(to(y, DType::F64)));
    REQUIRE(x.grad().has_value());
    CHECK(x.grad()->dtype() == DType::F32);
    const Tensor G = x.grad()->full_tensor();
    for (std::int64_t k = 0; k < G.numel(); ++k)
      CHECK(G.item_flat(k) == 1.0);
  }
  const DTensor x = distribute_tensor(X, mesh, {Shard(0)});
  CHECK_THROWS_WITH(dispatch("to", {x, std::string("int3")}), Contains("dtype"));
}

DTENSOR_TEST_CASE("autocast runs each operator family in its dtype", "[autocast]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  const DTensor x = distribute_tensor(Tensor::rand({2, 4, 8, 6}, DType::F32, 1), mesh, {Shard(2)});
  const DTensor w =
      distribute_tensor(Tensor::rand({4, 4, 3, 3}, DType::F32, 2), mesh, {Replicate()});
  const DTensor b = distribute_tensor(Tensor::rand({4}, DType::F32, 3), mesh, {Replicate()});
  CHECK_THROWS_AS(add(x, to(x, DType::BF16)), InvalidArgument);  // no promotion outside a scope
  {
    AutocastScope autocast;
    CHECK(autocast_enabled());
    CHECK(autocast_dtype() == DType::BF16);
    const DTensor y = convolution(x, w, b, same_3x3());
    CHECK(y.dtype() == DType::BF16);
    const DTensor n = group_norm(y, 2);
    CHECK(n.dtype() == DType::F32);
    CHECK(relu(y).dtype() == DType::BF16);        // no policy: its input's dtype
    CHECK(add(y, x).dtype() == DType::F32);       // the widest
    CHECK(cat({y, x}, 1).dtype() == DType::F32);  // the widest
    CHECK(mse_loss(y, x).dtype() == DType::F32);  // losses in f32
    CHECK(sum(y).dtype() == DType::F32);          // reductions in f32
    const DTensor x64 = to(x, DType::F64);
    CHECK(convolution(x64, to(w, DType::F64), std::nullopt, same_3x3()).dtype() == DType::F64);
    {
      AutocastScope off(false);
      CHECK_FALSE(autocast_enabled());
      CHECK(convolution(x, w, b, same_3x3()).dtype() == DType::F32);
    }
    CHECK(autocast_enabled());
  }
  CHECK_FALSE(autocast_enabled());
  CHECK_THROWS_WITH(AutocastScope(true, DType::F64), Contains("dtype"));

  // A user's operator gets a policy by name.
  set_autocast_policy("relu", AutocastPolicy::Float32);
  {
    AutocastScope autocast;
    CHECK(relu(to(x, DType::BF16)).dtype() == DType::F32);
  }
  set_autocast_policy("relu", AutocastPolicy::None);
}

DTENSOR_TEST_CASE("autocast training: bf16 convolutions, f32 gradients, bf16 precision",
                  "[autocast]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor X = Tensor::rand({2, 4, 10, 6}, DType::F64, 11);
  const Tensor W = Tensor::rand({4, 4, 3, 3}, DType::F64, 12);
  const Tensor T = Tensor::rand({2, 4, 10, 6}, DType::F64, 13);
  // loss = mse(group_norm(relu(conv(x, w))), t): f64 reference and autocast f32.
  auto run = [&](DType dt, bool autocast, Tensor& grad_w) {
    const DTensor x = distribute_tensor(X.to(dt), mesh, {Shard(2)});
    DTensor w = distribute_tensor(W.to(dt), mesh, {Replicate()});
    w.requires_grad_();
    const DTensor t = distribute_tensor(T.to(dt), mesh, {Shard(2)});
    DTensor loss = [&] {
      AutocastScope scope(autocast);
      const DTensor y = convolution(x, w, std::nullopt, same_3x3());
      if (autocast) CHECK(y.dtype() == DType::BF16);
      return mse_loss(group_norm(relu(y), 2), t);
    }();
    backward(loss);
    CHECK(w.grad()->dtype() == dt);
    grad_w = w.grad()->full_tensor().to(DType::F64);
    return loss.item();
  };
  Tensor g64, g16;
  const double l64 = run(DType::F64, false, g64);
  const double l16 = run(DType::F32, true, g16);
  CHECK(std::abs(l16 - l64) <= 2e-2 * std::abs(l64));
  CHECK(max_rel_diff(g16, g64) <= 5e-2);
  // Not the f32 result: bf16 arithmetic did run.
  Tensor g32;
  const double l32 = run(DType::F32, false, g32);
  CHECK(std::abs(l32 - l64) <= 1e-5 * std::abs(l64));
  CHECK(max_rel_diff(g16, g32) > 1e-5);
}
