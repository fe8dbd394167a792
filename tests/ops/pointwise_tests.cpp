// The built-in element-wise operators and reductions through dispatch, on
// several placements, against plain loops over the global tensors.
#include <catch2/catch.hpp>

#include <cmath>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/pointwise.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {
// out[i] = f(a[i], b[i]) over the global tensors, in f64.
template <typename F>
Tensor oracle(const Tensor& a, const Tensor& b, F f) {
  Tensor out = Tensor::empty(a.shape(), DType::F64);
  for (std::int64_t i = 0; i < a.numel(); ++i)
    out.data<double>()[i] = f(a.item_flat(i), b.item_flat(i));
  return out;
}
}  // namespace

TEST_CASE("pointwise add, mul, scale, relu, relu_backward on S(0),S(1) of a 2x2 mesh P=4",
          "[ops][pointwise][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const Tensor A = Tensor::rand({9, 7}, DType::F64, 1), B = Tensor::rand({9, 7}, DType::F64, 2);
    auto a = distribute_tensor(A, mesh, {Shard(0), Shard(1)});
    auto b = distribute_tensor(B, mesh, {Shard(0), Shard(1)});
    REQUIRE(max_abs_diff(add(a, b).full_tensor(), oracle(A, B, std::plus<>())) < 1e-15);
    REQUIRE(max_abs_diff(mul(a, b).full_tensor(), oracle(A, B, std::multiplies<>())) < 1e-15);
    REQUIRE(max_abs_diff(scale(a, -2.5).full_tensor(),
                         oracle(A, B, [](double x, double) { return -2.5 * x; })) < 1e-15);
    REQUIRE(max_abs_diff(relu(a).full_tensor(),
                         oracle(A, B, [](double x, double) { return x > 0 ? x : 0; })) == 0.0);
    REQUIRE(max_abs_diff(relu_backward(b, a).full_tensor(),
                         oracle(A, B, [](double x, double g) { return x > 0 ? g : 0; })) == 0.0);
    REQUIRE(add(a, b).placements() == Placements{Shard(0), Shard(1)});
  });
}

TEST_CASE("sum and mean of a sharded tensor are Partial(sum) and reduce to the global value P=3",
          "[ops][reduction][mp]") {
  run_ranks(3, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {3});
    const Tensor A = Tensor::rand({10, 4}, DType::F64, 3);
    double expect = 0;
    for (std::int64_t i = 0; i < A.numel(); ++i)
      expect += A.item_flat(i);
    auto a = distribute_tensor(A, mesh, {Shard(0)});
    auto s = sum(a);
    REQUIRE(s.placements() == Placements{Partial()});
    REQUIRE(s.shape().empty());
    REQUIRE(std::abs(s.full_tensor().item({}) - expect) < 1e-12);
    REQUIRE(std::abs(mean(a).full_tensor().item({}) - expect / 40) < 1e-14);
    auto r = distribute_tensor(A, mesh, {Replicate()});
    REQUIRE(sum(r).placements() == Placements{Replicate()});
    REQUIRE(std::abs(sum(r).to_local().item({}) - expect) < 1e-12);
  });
}

TEST_CASE("Partial inputs: add(P,P) stays Partial, mul(P,R) is Partial, relu(P) is reduced first",
          "[ops][partial][mp]") {
  run_ranks(2, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor A = Tensor::rand({4, 6}, DType::F64, 4), B = Tensor::rand({4, 6}, DType::F64, 5);
    // Rank 0 holds A - 1, rank 1 holds 1: the pending sum is A.
    Tensor part = ctx.rank == 0 ? A.clone() : Tensor::full({4, 6}, 1.0, DType::F64);
    if (ctx.rank == 0) part.add_(Tensor::full({4, 6}, -1.0, DType::F64));
    auto p = DTensor::from_local(part, mesh, {Partial()}, Shape{4, 6});
    auto b = distribute_tensor(B, mesh, {Replicate()});
    auto pp = add(p, p);
    REQUIRE(pp.placements() == Placements{Partial()});
    REQUIRE(max_abs_diff(pp.full_tensor(), oracle(A, A, std::plus<>())) < 1e-14);
    auto pb = mul(p, b);
    REQUIRE(pb.placements() == Placements{Partial()});
    REQUIRE(max_abs_diff(pb.full_tensor(), oracle(A, B, std::multiplies<>())) < 1e-14);
    // relu is not linear: the Partial is reduced (reduce-scatter is the cheapest) first.
    auto r = relu(p);
    REQUIRE_FALSE(r.placements()[0].is_partial());
    REQUIRE(max_abs_diff(r.full_tensor(),
                         oracle(A, A, [](double x, double) { return x > 0 ? x : 0; })) < 1e-15);
  });
}

TEST_CASE(
    "a small training step: relu, mul, mean loss and its gradient on 4 ranks match one process",
    "[ops][training][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const Tensor X = Tensor::rand({8, 6}, DType::F64, 10),
                 W0 = Tensor::rand({8, 6}, DType::F64, 11);
    auto x = distribute_tensor(X, mesh, {Shard(0), Shard(1)});
    auto w = distribute_tensor(W0, mesh, {Shard(0), Shard(1)});
    // loss = mean(relu(w * x)); dloss/dw = relu'(w*x) * x / N; w -= 0.5 * grad, three steps.
    Tensor Wref = W0.clone();
    for (int step = 0; step < 3; ++step) {
      auto z = mul(w, x);
      auto loss = mean(relu(z));
      auto grad_z = relu_backward(scale(x, 1.0 / 48), z);  // d relu(z)/dz * dz/dw / N
      w = add(w, scale(grad_z, -0.5));
      // Single-process reference, plain loops.
      double ref_loss = 0;
      Tensor g = Tensor::empty({8, 6}, DType::F64);
      for (std::int64_t i = 0; i < 48; ++i) {
        const double zi = Wref.item_flat(i) * X.item_flat(i);
        ref_loss += (zi > 0 ? zi : 0) / 48;
        g.data<double>()[i] = zi > 0 ? X.item_flat(i) / 48 : 0;
      }
      for (std::int64_t i = 0; i < 48; ++i)
        Wref.data<double>()[i] -= 0.5 * g.data<double>()[i];
      REQUIRE(std::abs(loss.full_tensor().item({}) - ref_loss) < 1e-14);
    }
    REQUIRE(max_abs_diff(w.full_tensor(), Wref) < 1e-14);
  });
}

TEST_CASE("pointwise ops in f16 compute in f32 and round once P=2", "[ops][pointwise][mp][f16]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor A = Tensor::rand({5, 9}, DType::F16, 1), B = Tensor::rand({5, 9}, DType::F16, 2);
    auto a = distribute_tensor(A, mesh, {Shard(1)});
    auto b = distribute_tensor(B, mesh, {Shard(1)});
    // The oracle is exact (f64 on the f16 inputs); the result is one f16
    // rounding away: at most half a unit in the last place, 2^-11 relative.
    const auto within_one_rounding = [](const Tensor& got, const Tensor& want) {
      for (std::int64_t i = 0; i < want.numel(); ++i)
        if (std::abs(got.item_flat(i) - want.item_flat(i)) >
            std::ldexp(1.0, -11) * std::abs(want.item_flat(i)))
          return false;
      return true;
    };
    const Tensor sum_ab = add(a, b).full_tensor();
    CHECK(sum_ab.dtype() == DType::F16);
    CHECK(within_one_rounding(sum_ab, oracle(A, B, std::plus<>())));
    CHECK(within_one_rounding(mul(a, b).full_tensor(), oracle(A, B, std::multiplies<>())));
    CHECK(within_one_rounding(scale(a, 0.3).full_tensor(),
                              oracle(A, B, [](double x, double) { return 0.3 * x; })));
    CHECK(max_abs_diff(relu(a).full_tensor(),
                       oracle(A, B, [](double x, double) { return x > 0 ? x : 0; })) == 0.0);
    // sum: each rank's partial sum is rounded to f16, and so is their sum:
    // three roundings, each at most 2^-11 of something <= sum |A|.
    double s = 0, abs_sum = 0;
    for (std::int64_t i = 0; i < A.numel(); ++i) {
      s += A.item_flat(i);
      abs_sum += std::abs(A.item_flat(i));
    }
    const double got = sum(a).full_tensor().item({});
    CHECK(std::abs(got - s) <= 3 * std::ldexp(1.0, -11) * std::max(1.0, abs_sum));
  });
}
