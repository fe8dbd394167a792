// The reductions over dims (sum, mean, amax, amin, var), softmax and
// log_softmax, forward and through autograd, on 1, 2 and 4 ranks and a 2x2
// mesh, with uneven and empty shards and the reduced dim sharded, against
// plain f64 loops over the global tensors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/reductions.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

using Int = std::int64_t;
using Group = std::vector<double>;

// Seeded values in [-1, 1) rounded to quarters: many exact ties for amax/amin.
Tensor quarters(const Shape& shape, std::uint64_t seed, double offset = 0) {
  Tensor t = Tensor::rand(shape, DType::F64, seed);
  for (Int i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = offset + std::round(4 * t.data<double>()[i]) / 4;
  return t;
}

// The flat index of input element i in the (keepdim) result.
Int result_index(const Shape& in, const std::vector<Int>& dims, Int i) {
  Int idx = 0, stride = 1;
  for (auto d = static_cast<Int>(in.size()) - 1; d >= 0; --d) {
    const Int n = in[static_cast<std::size_t>(d)];
    const Int k = i % n;
    i /= n;
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    idx += k * stride;
    stride *= n;
  }
  return idx;
}

Int result_count(const Shape& in, const std::vector<Int>& dims) {
  Int n = 1;
  for (std::size_t d = 0; d < in.size(); ++d)
    if (std::find(dims.begin(), dims.end(), static_cast<Int>(d)) == dims.end()) n *= in[d];
  return n;
}

struct Oracle {
  std::function<double(const Group&)> value;
  // The derivative of the value with respect to element k of the group.
  std::function<double(const Group&, std::size_t k, double result)> derivative;
};

double total(const Group& g) {
  double s = 0;
  for (double v : g)
    s += v;
  return s;
}

Oracle oracle(const std::string& op, double correction) {
  if (op == "sum") return {total, [](const Group&, std::size_t, double) { return 1.0; }};
  if (op == "mean")
    return {
        [](const Group& g) { return total(g) / static_cast<double>(g.size()); },
        [](const Group& g, std::size_t, double) { return 1.0 / static_cast<double>(g.size()); }};
  if (op == "amax" || op == "amin") {
    const bool mx = op == "amax";
    return {[mx](const Group& g) {
              double m = g[0];
              for (double v : g)
                m = mx ? std::max(m, v) : std::min(m, v);
              return m;
            },
            [](const Group& g, std::size_t k, double r) {
              double ties = 0;
              for (double v : g)
                ties += v == r ? 1 : 0;
              return g[k] == r ? 1.0 / ties : 0.0;
            }};
  }
  // var: two passes over the group.
  return {[correction](const Group& g) {
            const double mu = total(g) / static_cast<double>(g.size());
            double m2 = 0;
            for (double v : g)
              m2 += (v - mu) * (v - mu);
            return m2 / std::max(0.0, static_cast<double>(g.size()) - correction);
          },
          [correction](const Group& g, std::size_t k, double) {
            const double mu = total(g) / static_cast<double>(g.size());
            return 2 * (g[k] - mu) / std::max(0.0, static_cast<double>(g.size()) - correction);
          }};
}

DTensor run_op(const std::string& op, const DTensor& x, const std::vector<Int>& dims, bool keepdim,
               double correction) {
  if (op == "sum") return sum(x, dims, keepdim);
  if (op == "mean") return mean(x, dims, keepdim);
  if (op == "amax") return amax(x, dims, keepdim);
  if (op == "amin") return amin(x, dims, keepdim);
  return var(x, dims, correction, keepdim);
}

Shape result_shape(const Shape& in, const std::vector<Int>& dims, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < in.size(); ++d) {
    const bool r = std::find(dims.begin(), dims.end(), static_cast<Int>(d)) != dims.end();
    if (!r)
      out.push_back(in[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// Every reduction over several dim lists, with and without keepdim, of an
// input of `shape` placed `p`: the result and the input's gradient.
void check_reductions(const DeviceMesh& mesh, const Shape& shape, const Placements& p) {
  const auto nd = static_cast<Int>(shape.size());
  const Tensor X = quarters(shape, 7, 0.0);
  std::vector<std::vector<Int>> dim_lists{{}, {0}, {-1}};
  if (nd > 1) {
    dim_lists.push_back({0, nd - 1});
    dim_lists.push_back({1});
  }
  struct Op {
    std::string name;
    double correction;
  };
  for (const Op& op : {Op{"sum", 1}, Op{"mean", 1}, Op{"amax", 1}, Op{"amin", 1}, Op{"var", 1},
                       Op{"var", 0}, Op{"var", 2.5}}) {
    for (const auto& given : dim_lists) {
      for (bool keepdim : {false, true}) {
        INFO(op.name << " correction " << op.correction << " dims " << given.size() << " keepdim "
                     << keepdim << " input " << shape_str(shape) << " placements "
                     << placements_str(p));
        const std::vector<Int> dims = normalize_reduction_dims(given, nd);
        const Oracle o = oracle(op.name, op.correction);
        // The groups of input elements reduced into each result.
        const Int results = result_count(shape, dims);
        std::vector<Group> groups(static_cast<std::size_t>(results));
        std::vector<std::pair<Int, std::size_t>> where(static_cast<std::size_t>(X.numel()));
        for (Int i = 0; i < X.numel(); ++i) {
          const auto r = static_cast<std::size_t>(result_index(shape, dims, i));
          where[static_cast<std::size_t>(i)] = {static_cast<Int>(r), groups[r].size()};
          groups[r].push_back(X.item_flat(i));
        }
        DTensor x = distribute_tensor(X, mesh, p);
        x.requires_grad_();
        const DTensor y = run_op(op.name, x, given, keepdim, op.correction);
        REQUIRE(y.shape() == result_shape(shape, dims, keepdim));
        const Tensor Y = y.full_tensor();
        double err = 0;
        for (Int r = 0; r < results; ++r) {
          const double want = o.value(groups[static_cast<std::size_t>(r)]);
          const double got = Y.item_flat(r);
          if (std::isnan(want) || std::isinf(want))
            CHECK((std::isnan(got) || std::isinf(got)));
          else
            err = std::max(err, std::abs(got - want));
        }
        CHECK(err < 1e-12);
        if (op.name == "var" && static_cast<double>(X.numel() / results) <= op.correction)
          continue;  // no finite gradient
        const Tensor G = quarters(y.shape(), 9, 0.5);
        backward(sum(mul(y, distribute_tensor(G, mesh, Placements(p.size(), Replicate())))));
        REQUIRE(x.grad().has_value());
        const Tensor GX = x.grad()->full_tensor();
        double gerr = 0;
        for (Int i = 0; i < X.numel(); ++i) {
          const auto [r, k] = where[static_cast<std::size_t>(i)];
          const auto& g = groups[static_cast<std::size_t>(r)];
          const double want = G.item_flat(r) * o.derivative(g, k, o.value(g));
          gerr = std::max(gerr, std::abs(GX.item_flat(i) - want));
        }
        CHECK(gerr < 1e-12);
      }
    }
  }
}

// softmax and log_softmax along every dim: values and gradients.
void check_softmax(const DeviceMesh& mesh, const Shape& shape, const Placements& p) {
  const auto nd = static_cast<Int>(shape.size());
  const Tensor X = quarters(shape, 11, 0.0);
  for (bool logarithm : {false, true}) {
    for (Int dim = -nd; dim < nd; ++dim) {
      INFO((logarithm ? "log_softmax" : "softmax")
           << " dim " << dim << " input " << shape_str(shape) << " placements "
           << placements_str(p));
      const Int d = dim < 0 ? dim + nd : dim;
      DTensor x = distribute_tensor(X, mesh, p);
      x.requires_grad_();
      const DTensor y = logarithm ? log_softmax(x, dim) : softmax(x, dim);
      REQUIRE(y.shape() == shape);
      const Tensor G = quarters(shape, 13, 0.0);
      backward(sum(mul(y, distribute_tensor(G, mesh, Placements(p.size(), Replicate())))));
      const Tensor Y = y.full_tensor();
      const Tensor GX = x.grad()->full_tensor();
      // Groups: the elements along d.
      std::vector<std::vector<Int>> groups(static_cast<std::size_t>(result_count(shape, {d})));
      for (Int i = 0; i < X.numel(); ++i)
        groups[static_cast<std::size_t>(result_index(shape, {d}, i))].push_back(i);
      double err = 0, gerr = 0;
      for (const auto& idx : groups) {
        double m = -std::numeric_limits<double>::infinity();
        for (Int i : idx)
          m = std::max(m, X.item_flat(i));
        double s = 0;
        for (Int i : idx)
          s += std::exp(X.item_flat(i) - m);
        double gy = 0, gsum = 0;  // sum(g * softmax), sum(g)
        for (Int i : idx) {
          gy += G.item_flat(i) * std::exp(X.item_flat(i) - m) / s;
          gsum += G.item_flat(i);
        }
        for (Int i : idx) {
          const double sm = std::exp(X.item_flat(i) - m) / s;
          const double want = logarithm ? X.item_flat(i) - m - std::log(s) : sm;
          const double gwant = logarithm ? G.item_flat(i) - sm * gsum : sm * (G.item_flat(i) - gy);
          err = std::max(err, std::abs(Y.item_flat(i) - want));
          gerr = std::max(gerr, std::abs(GX.item_flat(i) - gwant));
        }
      }
      CHECK(err < 1e-13);
      CHECK(gerr < 1e-13);
    }
  }
}

}  // namespace

TEST_CASE("reductions over dims and their gradients on one rank", "[ops][reduce]") {
  run_ranks(1, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {1});
    check_reductions(mesh, {3, 5, 4}, {Replicate()});
    check_reductions(mesh, {7}, {Shard(0)});
  });
}

TEST_CASE("reductions over dims P=2: every dim sharded, uneven and empty shards",
          "[ops][reduce][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    for (const Placements& p : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Shard(2)},
                                Placements{Replicate()}})
      check_reductions(mesh, {3, 5, 7}, p);
    check_reductions(mesh, {1, 3, 2}, {Shard(0)});  // rank 1 holds nothing
  });
}

TEST_CASE("reductions over dims on a 2x2 mesh and P=4 with empty shards", "[ops][reduce][mp]") {
  run_ranks(4, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2, 2});
    for (const Placements& p : {Placements{Shard(0), Shard(2)}, Placements{Shard(2), Replicate()},
                                Placements{Shard(1), Shard(1)}})
      check_reductions(mesh, {3, 5, 3}, p);
  });
  run_ranks(4, [](RankContext&) {
    check_reductions(DeviceMesh(DeviceType::CPU, {4}), {3, 2, 5}, {Shard(0)});
  });
}

TEST_CASE("reductions keep the Shard of a dim they keep, and leave a reduced one Partial",
          "[ops][reduce][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor X = quarters({4, 6, 5}, 3);
    const DTensor x = distribute_tensor(X, mesh, {Shard(2)});
    CHECK(sum(x, {0}).placements() == Placements{Shard(1)});
    CHECK(sum(x, {0}, true).placements() == Placements{Shard(2)});
    CHECK(mean(x, {2}).placements() == Placements{Partial()});
    CHECK(amax(x, {2}).placements() == Placements{Partial(ReduceOp::Max)});
    CHECK(amin(x, {-1}).placements() == Placements{Partial(ReduceOp::Min)});
    CHECK(var(x, {2}).placements() == Placements{Replicate()});
    // A Partial(sum) input stays Partial under sum and mean.
    const DTensor p = DTensor::from_local(X, mesh, {Partial()}, X.shape());
    const DTensor s = sum(p, {1});
    CHECK(s.placements() == Placements{Partial()});
    const Tensor S = s.full_tensor(), M = amax(p, {1}).full_tensor();
    for (Int i = 0; i < 4; ++i)
      for (Int k = 0; k < 5; ++k) {
        double t = 0, m = -1e300;
        for (Int j = 0; j < 6; ++j) {
          t += 2 * X.item({i, j, k});
          m = std::max(m, 2 * X.item({i, j, k}));
        }
        CHECK(std::abs(S.item({i, k}) - t) < 1e-12);
        CHECK(std::abs(M.item({i, k}) - m) < 1e-12);
      }
  });
}

TEST_CASE("var merges shards far from zero without cancellation", "[ops][reduce][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    // 1e8 + quarters in f64: sum(x^2) - n mean^2 would lose every digit
    // (x^2 ~ 1e16 has an ulp of 2); the moments keep the error near ulp(1e8).
    const Tensor X = quarters({5, 9}, 5, 1e8);
    const Tensor V = var(distribute_tensor(X, mesh, {Shard(1)}), {1}).full_tensor();
    for (Int i = 0; i < 5; ++i) {
      double mu = 0, m2 = 0;
      for (Int j = 0; j < 9; ++j)
        mu += (X.item({i, j}) - 1e8) / 9;
      for (Int j = 0; j < 9; ++j)
        m2 += (X.item({i, j}) - 1e8 - mu) * (X.item({i, j}) - 1e8 - mu);
      CHECK(std::abs(V.item({i}) - m2 / 8) < 1e-6);
    }
  });
}

TEST_CASE("f32 and bf16 reductions accumulate in f64", "[ops][reduce][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    for (DType dt : {DType::F32, DType::BF16}) {
      const Tensor X = quarters({6, 5}, 3).to(dt);
      const DTensor x = distribute_tensor(X, mesh, {Shard(0)});
      const Tensor S = sum(x, {0}).full_tensor(), V = var(x, {0}).full_tensor();
      REQUIRE(S.dtype() == dt);
      REQUIRE(V.dtype() == dt);
      for (Int j = 0; j < 5; ++j) {
        double t = 0, mu = 0, m2 = 0;
        for (Int i = 0; i < 6; ++i)
          t += X.item({i, j});
        mu = t / 6;
        for (Int i = 0; i < 6; ++i)
          m2 += (X.item({i, j}) - mu) * (X.item({i, j}) - mu);
        const double tol = dt == DType::F32 ? 1e-6 : 2e-2;
        CHECK(std::abs(S.item({j}) - t) < tol);
        CHECK(std::abs(V.item({j}) - m2 / 5) < tol);
      }
    }
  });
}

TEST_CASE("reductions refuse bad dims on every rank, naming dims", "[ops][reduce][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    const DTensor x = distribute_tensor(quarters({3, 4}, 1), mesh, {Shard(1)});
    CHECK_THROWS_AS(sum(x, {2}), InvalidArgument);
    CHECK_THROWS_WITH(amax(x, {-3}), Catch::Contains("dims") && Catch::Contains("out of range"));
    CHECK_THROWS_WITH(var(x, {1, -1}), Catch::Contains("dims") && Catch::Contains("twice"));
    CHECK_THROWS_WITH(var(x, {0}, -1.0), Catch::Contains("correction"));
    CHECK_THROWS_WITH(softmax(x, 2), Catch::Contains("dim") && Catch::Contains("out of range"));
    CHECK_THROWS_WITH(log_softmax(x, -3), Catch::Contains("dim"));
    CHECK(normalize_reduction_dims({}, 3) == std::vector<Int>{0, 1, 2});
    CHECK(normalize_reduction_dims({-1, 0}, 3) == std::vector<Int>{0, 2});
  });
}

TEST_CASE("softmax and log_softmax on one rank", "[ops][softmax]") {
  run_ranks(1, [](RankContext&) {
    check_softmax(DeviceMesh(DeviceType::CPU, {1}), {3, 4, 5}, {Replicate()});
  });
}

TEST_CASE("softmax and log_softmax along a sharded dim, P=2 and a 2x2 mesh", "[ops][softmax][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    for (const Placements& p : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Shard(2)},
                                Placements{Replicate()}})
      check_softmax(mesh, {3, 5, 7}, p);
    check_softmax(mesh, {2, 1, 3}, {Shard(1)});  // rank 1 holds nothing
  });
  run_ranks(4, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2, 2});
    check_softmax(mesh, {3, 5, 3}, {Shard(1), Shard(2)});
    check_softmax(mesh, {3, 5, 3}, {Shard(2), Shard(2)});
  });
}

TEST_CASE("reductions and softmax of a 0-d input", "[ops][reduce]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    DTensor x = distribute_tensor(Tensor::full({}, 0.75, DType::F64), mesh, {Replicate()});
    x.requires_grad_();
    CHECK(sum(x, {}).full_tensor().item_flat(0) == 0.75);
    CHECK(mean(x, {0}, true).shape().empty());
    CHECK(amax(x, {-1}).full_tensor().item_flat(0) == 0.75);
    CHECK(std::isnan(var(x, {}).full_tensor().item_flat(0)));  // 0 / 0, as torch
    CHECK(var(x, {}, 0.0).full_tensor().item_flat(0) == 0.0);
    CHECK(softmax(x, 0).full_tensor().item_flat(0) == 1.0);
    CHECK(log_softmax(x, -1).full_tensor().item_flat(0) == 0.0);
    backward(sum(x, {}) * 3.0 + amin(x, {}));
    REQUIRE(x.grad().has_value());
    CHECK(x.grad()->full_tensor().item_flat(0) == 4.0);
    CHECK_THROWS_WITH(sum(x, {1}), Catch::Contains("dims"));
  });
}
