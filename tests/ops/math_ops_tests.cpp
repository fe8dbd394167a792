// The broadcasting binary operators (add, sub, mul, div, maximum, minimum)
// and the unary functions (exp, log, sqrt, rsqrt, neg, abs, square, clamp,
// pow), forward and through autograd, on 1, 2 and 4 ranks and a 2x2 mesh,
// sharded and replicated, against plain f64 loops over the global tensors.
#include <omp.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/unary.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

using Int = std::int64_t;
using Binary = std::function<double(double, double)>;

// The flat index in `shape` (broadcast to `out`) of out's flat element i.
Int broadcast_index(const Shape& out, const Shape& shape, Int i) {
  const auto off = static_cast<Int>(out.size() - shape.size());
  Int idx = 0, stride = 1;
  for (auto d = static_cast<Int>(out.size()) - 1; d >= 0; --d) {
    const Int n = out[static_cast<std::size_t>(d)];
    const Int k = i % n;
    i /= n;
    if (d >= off) {
      const Int m = shape[static_cast<std::size_t>(d - off)];
      idx += (m == 1 ? 0 : k) * stride;
      stride *= m;
    }
  }
  return idx;
}

// A seeded tensor of `shape` with values in [lo, lo + 1).
Tensor values(const Shape& shape, std::uint64_t seed, double lo) {
  Tensor t = Tensor::rand(shape, DType::F64, seed);  // in [-1, 1)
  for (Int i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = lo + 0.5 * (t.data<double>()[i] + 1);
  return t;
}

struct BinaryCase {
  const char* name;
  std::function<DTensor(const DTensor&, const DTensor&)> op;
  Binary f, dfa, dfb;  // value and partial derivatives
};

std::vector<BinaryCase> binary_cases() {
  const auto share = [](double x, double z) { return x > z ? 1.0 : x == z ? 0.5 : 0.0; };
  return {
      {"add", [](auto& a, auto& b) { return add(a, b); }, std::plus<>(),
       [](double, double) { return 1.0; }, [](double, double) { return 1.0; }},
      {"sub", [](auto& a, auto& b) { return a - b; }, std::minus<>(),
       [](double, double) { return 1.0; }, [](double, double) { return -1.0; }},
      {"mul", [](auto& a, auto& b) { return a * b; }, std::multiplies<>(),
       [](double, double z) { return z; }, [](double x, double) { return x; }},
      {"div", [](auto& a, auto& b) { return a / b; }, std::divides<>(),
       [](double, double z) { return 1 / z; }, [](double x, double z) { return -x / (z * z); }},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); },
       [](double x, double z) { return std::max(x, z); }, share,
       [share](double x, double z) { return share(z, x); }},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); },
       [](double x, double z) { return std::min(x, z); },
       [share](double x, double z) { return share(z, x); }, share},
  };
}

// Every binary operator on input `in` placed `pa` and other `os` (placed
// like the input when the shapes are equal, else replicated), forward and
// backward against loops.
void check_binary(const DeviceMesh& mesh, const Shape& in, const Placements& pa, const Shape& os) {
  const Placements rep(static_cast<std::size_t>(mesh.ndim()), Replicate());
  const Tensor A = values(in, 1, 0.5), B = values(os, 2, 0.5);
  // Exact ties for maximum/minimum: the other's first element in the input.
  A.data<double>()[0] = B.item_flat(0);
  const Shape out = broadcast_shapes(in, os);
  REQUIRE(out == in);
  const Tensor G = values(out, 3, -0.5);
  for (const auto& c : binary_cases()) {
    INFO(c.name << " input " << shape_str(in) << " other " << shape_str(os));
    DTensor a = distribute_tensor(A, mesh, pa);
    DTensor b = distribute_tensor(B, mesh, os == in ? pa : rep);
    a.requires_grad_();
    b.requires_grad_();
    const DTensor y = c.op(a, b);
    REQUIRE(y.shape() == out);
    const Tensor Y = y.full_tensor();
    Tensor ga = Tensor::zeros(in, DType::F64), gb = Tensor::zeros(os, DType::F64);
    double err = 0;
    for (Int i = 0; i < shape_numel(out); ++i) {
      const double x = A.item_flat(i), z = B.item_flat(broadcast_index(out, os, i));
      err = std::max(err, std::abs(Y.item_flat(i) - c.f(x, z)));
      ga.data<double>()[i] += G.item_flat(i) * c.dfa(x, z);
      gb.data<double>()[broadcast_index(out, os, i)] += G.item_flat(i) * c.dfb(x, z);
    }
    CHECK(err < 1e-15);
    if (os == in) CHECK(y.placements() == pa);
    backward(sum(mul(y, distribute_tensor(G, mesh, y.placements()))));
    REQUIRE(a.grad().has_value());
    REQUIRE(b.grad().has_value());
    CHECK(a.grad()->spec() == a.spec());
    CHECK(b.grad()->spec() == b.spec());
    CHECK(max_abs_diff(a.grad()->full_tensor(), ga) < 1e-13);
    CHECK(max_abs_diff(b.grad()->full_tensor(), gb) < 1e-12);
  }
}

void check_binary_shapes(const DeviceMesh& mesh, const std::vector<Placements>& placements) {
  const Shape in{2, 4, 3, 5};
  for (const auto& p : placements)
    for (const Shape& os : {in, Shape{1, 4, 1, 1}, Shape{5}, Shape{}, Shape{3, 1}, Shape{4, 3, 5}})
      check_binary(mesh, in, p, os);
}

struct UnaryCase {
  const char* name;
  std::function<DTensor(const DTensor&)> op;
  std::function<double(double)> f, df;
  double lo;  // inputs in [lo, lo + 1)
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", [](auto& x) { return exp(x); }, [](double x) { return std::exp(x); },
       [](double x) { return std::exp(x); }, -0.5},
      {"log", [](auto& x) { return natural_log(x); }, [](double x) { return std::log(x); },
       [](double x) { return 1 / x; }, 0.5},
      {"sqrt", [](auto& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); },
       [](double x) { return 0.5 / std::sqrt(x); }, 0.5},
      {"rsqrt", [](auto& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
       [](double x) { return -0.5 / (x * std::sqrt(x)); }, 0.5},
      {"neg", [](auto& x) { return -x; }, [](double x) { return -x; }, [](double) { return -1.0; },
       -0.5},
      {"abs", [](auto& x) { return abs(x); }, [](double x) { return std::abs(x); },
       [](double x) { return x > 0   ? 1.0
                             : x < 0 ? -1.0
                                     : 0.0; }, -0.5},
      {"square", [](auto& x) { return square(x); }, [](double x) { return x * x; },
       [](double x) { return 2 * x; }, -0.5},
      {"clamp", [](auto& x) { return clamp(x, -0.2, 0.3); },
       [](double x) { return std::min(std::max(x, -0.2), 0.3); },
       [](double x) { return x >= -0.2 && x <= 0.3 ? 1.0 : 0.0; }, -0.5},
      {"clamp min", [](auto& x) { return clamp(x, 0.1, std::nullopt); },
       [](double x) { return std::max(x, 0.1); }, [](double x) { return x >= 0.1 ? 1.0 : 0.0; },
       -0.5},
      {"clamp max", [](auto& x) { return clamp(x, std::nullopt, 0.1); },
       [](double x) { return std::min(x, 0.1); }, [](double x) { return x <= 0.1 ? 1.0 : 0.0; },
       -0.5},
      {"pow", [](auto& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); },
       [](double x) { return 2.5 * std::pow(x, 1.5); }, 0.5},
      {"pow 0", [](auto& x) { return pow(x, 0.0); }, [](double) { return 1.0; },
       [](double) { return 0.0; }, 0.5},
  };
}

void check_unary(const DeviceMesh& mesh, const Placements& p) {
  const Shape in{3, 4, 5};
  const Tensor G = values(in, 3, -0.5);
  for (const auto& c : unary_cases()) {
    INFO(c.name);
    Tensor X = values(in, 4, c.lo);
    X.data<double>()[1] = 0.0;  // abs at 0
    if (c.lo > 0) X.data<double>()[1] = 1.0;
    DTensor x = distribute_tensor(X, mesh, p);
    x.requires_grad_();
    const DTensor y = c.op(x);
    CHECK(y.placements() == p);
    const Tensor Y = y.full_tensor();
    Tensor gx = Tensor::empty(in, DType::F64);
    double err = 0;
    for (Int i = 0; i < X.numel(); ++i) {
      err = std::max(err, std::abs(Y.item_flat(i) - c.f(X.item_flat(i))));
      gx.data<double>()[i] = G.item_flat(i) * c.df(X.item_flat(i));
    }
    CHECK(err < 1e-14);
    backward(sum(mul(y, distribute_tensor(G, mesh, p))));
    REQUIRE(x.grad().has_value());
    CHECK(max_abs_diff(x.grad()->full_tensor(), gx) < 1e-13);
  }
}

}  // namespace

TEST_CASE("broadcasting binary operators and their gradients on one rank", "[ops][math]") {
  run_ranks(1, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {1});
    check_binary_shapes(mesh, {{Replicate()}, {Shard(1)}});
  });
}

TEST_CASE("broadcasting binary operators and their gradients P=2", "[ops][math][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    check_binary_shapes(mesh, {{Shard(1)}, {Shard(3)}, {Replicate()}});
  });
}

TEST_CASE("broadcasting binary operators and their gradients P=4 (uneven shards)",
          "[ops][math][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {4});
    check_binary_shapes(mesh, {{Shard(0)}, {Shard(2)}});
  });
}

TEST_CASE("broadcasting binary operators and their gradients on a 2x2 mesh", "[ops][math][mp]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    check_binary_shapes(mesh, {{Shard(1), Shard(3)}, {Shard(0), Replicate()}});
  });
}

TEST_CASE("unary functions and their gradients on 1, 2 and 4 ranks", "[ops][math][mp]") {
  run_ranks(1, [](RankContext&) { check_unary(DeviceMesh(DeviceType::CPU, {1}), {Replicate()}); });
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    check_unary(mesh, {Shard(2)});
    check_unary(mesh, {Replicate()});
  });
  run_ranks(4, [](RankContext&) {
    check_unary(DeviceMesh(DeviceType::CPU, {2, 2}), {Shard(0), Shard(1)});
  });
}

TEST_CASE("Partial operands: add/sub(P,P) and mul/div(P,R) stay Partial, neg(P) too",
          "[ops][math][partial][mp]") {
  run_ranks(2, [](RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Shape s{4, 6};
    const Tensor A = values(s, 4, 0.5), B = values(s, 5, 0.5);
    // Rank 0 holds A - 1, rank 1 holds 1: the pending sum is A.
    Tensor part = ctx.rank == 0 ? A.clone() : Tensor::full(s, 1.0, DType::F64);
    if (ctx.rank == 0) part.add_(Tensor::full(s, -1.0, DType::F64));
    const auto p = DTensor::from_local(part, mesh, {Partial()}, s);
    const auto b = distribute_tensor(B, mesh, {Replicate()});
    // partial: whether the result must stay Partial (nullopt: either will do).
    const auto expect = [&](const DTensor& y, std::optional<bool> partial, const Binary& f) {
      if (partial) CHECK(y.placements()[0].is_partial() == *partial);
      double err = 0;
      const Tensor Y = y.full_tensor();
      for (Int i = 0; i < A.numel(); ++i)
        err = std::max(err, std::abs(Y.item_flat(i) - f(A.item_flat(i), B.item_flat(i))));
      CHECK(err < 1e-14);
    };
    expect(p - p, true, [](double, double) { return 0.0; });
    expect(p * b, true, std::multiplies<>());
    expect(p / b, true, std::divides<>());
    expect(-p, true, [](double x, double) { return -x; });
    expect(maximum(p, b), false, [](double x, double z) { return std::max(x, z); });
    // p + b must not add b once per rank: either the Partial is reduced
    // first, or b becomes Partial (b on one rank, zeros on the others).
    expect(p + b, std::nullopt, std::plus<>());
    expect(p + 2.0, std::nullopt, [](double x, double) { return x + 2; });
    expect(p * 2.0, true, [](double x, double) { return 2 * x; });
    expect(2.0 / b, false, [](double, double z) { return 2 / z; });
    expect(exp(p), false, [](double x, double) { return std::exp(x); });
  });
}

TEST_CASE("binary operators refuse shapes that do not broadcast, clamp needs a bound",
          "[ops][math]") {
  run_ranks(1, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {1});
    const auto a = distribute_tensor(Tensor::rand({2, 3}, DType::F64, 1), mesh, {Replicate()});
    const auto b = distribute_tensor(Tensor::rand({2}, DType::F64, 2), mesh, {Replicate()});
    CHECK_THROWS_WITH(add(a, b), Catch::Contains("do not broadcast"));
    CHECK_THROWS_WITH(clamp(a, std::nullopt, std::nullopt), Catch::Contains("at least one bound"));
    CHECK(broadcast_shapes({4, 1, 3}, {5, 1}) == Shape{4, 5, 3});
  });
}

TEST_CASE("f32 and bf16 binary and unary operators compute in f32", "[ops][math][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    for (DType dt : {DType::F32, DType::BF16}) {
      const Tensor A = values({4, 6}, 1, 0.5).to(dt), B = values({6}, 2, 0.5).to(dt);
      const auto a = distribute_tensor(A, mesh, {Shard(1)});
      const auto b = distribute_tensor(B, mesh, {Replicate()});
      const Tensor Y = (a / b).full_tensor(), L = sqrt(a).full_tensor();
      REQUIRE(Y.dtype() == dt);
      const double tol = dt == DType::F32 ? 1e-6 : 1e-2;
      for (Int i = 0; i < A.numel(); ++i) {
        CHECK(std::abs(Y.item_flat(i) - A.item_flat(i) / B.item_flat(i % 6)) < tol);
        CHECK(std::abs(L.item_flat(i) - std::sqrt(A.item_flat(i))) < tol);
      }
    }
  });
}

TEST_CASE("large operands take the kernels' threaded paths and agree with loops", "[ops][math]") {
  run_ranks(1, [](RankContext&) {
    omp_set_num_threads(2);
    DeviceMesh mesh(DeviceType::CPU, {1});
    const Shape in{2, 64, 32, 33};  // over the kernels' threading threshold
    const Tensor A = values(in, 1, 0.5);
    const auto a = distribute_tensor(A, mesh, {Replicate()});
    for (const Shape& os : {in, Shape{64, 1, 1}, Shape{}}) {
      INFO("other " << shape_str(os));
      const Tensor B = values(os, 2, 0.5);
      const Tensor Y = (a * distribute_tensor(B, mesh, {Replicate()})).full_tensor();
      double err = 0;
      for (Int i = 0; i < A.numel(); ++i)
        err = std::max(err, std::abs(Y.item_flat(i) -
                                     A.item_flat(i) * B.item_flat(broadcast_index(in, os, i))));
      CHECK(err == 0.0);
    }
    const Tensor S = sqrt(a).full_tensor();
    double err = 0;
    for (Int i = 0; i < A.numel(); ++i)
      err = std::max(err, std::abs(S.item_flat(i) - std::sqrt(A.item_flat(i))));
    CHECK(err == 0.0);
  });
}
