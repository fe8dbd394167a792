// mse_loss and cross_entropy (class-probability targets, dim 1), forward and
// backward, against naive f64 loops written here, over seeded random shapes
// and placements of input and target (alike or not, sharded along any dim
// including the class dim, uneven and empty shards, Partial) on meshes 2, 3,
// 4 and 2x2; reductions mean and sum; the loss's gradient 1 or given.
#include <fmt/format.h>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/losses.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

struct Case {
  bool ce = false;
  Shape shape;
  Placements px, pt;
  LossReduction reduction = LossReduction::Mean;
  double grad = 1.0;
  bool grad_as_dtensor = false;
  std::uint64_t seed = 0;
  std::string str() const {
    return fmt::format("{} shape {} input {} target {} {} grad {}{} seed {}",
                       ce ? "cross_entropy" : "mse_loss", shape_str(shape), placements_str(px),
                       placements_str(pt), loss_reduction_name(reduction), grad,
                       grad_as_dtensor ? " (DTensor)" : "", seed);
  }
};

Case random_case(Rng& rng, const Shape& mesh, bool ce) {
  Case c;
  c.ce = ce;
  c.seed = rng();
  const std::int64_t ndim = uni(rng, ce ? 2 : 1, 4);
  for (std::int64_t d = 0; d < ndim; ++d)
    c.shape.push_back(ce && d == 1           ? uni(rng, 1, 6)
                      : uni(rng, 0, 15) == 0 ? 0
                                             : uni(rng, 1, ndim <= 2 ? 9 : 4));
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < ndim; ++d)
    dims.push_back(d);
  c.px = random_placements(rng, mesh, dims, 75, 10, uni(rng, 0, 4) == 0);
  c.pt = uni(rng, 0, 1) ? c.px : random_placements(rng, mesh, dims, 75, 10, false);
  c.reduction = uni(rng, 0, 2) ? LossReduction::Mean : LossReduction::Sum;
  c.grad = uni(rng, 0, 1) ? 1.0 : 0.25 * static_cast<double>(uni(rng, -8, 8));
  c.grad_as_dtensor = uni(rng, 0, 1);
  return c;
}

// Loss and d loss / d input (times grad), naively.
std::pair<double, Tensor> reference(const Case& c, const Tensor& X_, const Tensor& T_) {
  const Tensor X = X_.to(DType::F64), T = T_.to(DType::F64);
  const double* x = X.data<double>();
  const double* t = T.data<double>();
  Tensor G = Tensor::zeros(c.shape, DType::F64);
  double* g = G.data<double>();
  const std::int64_t n = X.numel();
  const bool mean = c.reduction == LossReduction::Mean;
  if (!c.ce) {
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i)
      s += (x[i] - t[i]) * (x[i] - t[i]);
    const double den = mean ? static_cast<double>(n) : 1.0;
    for (std::int64_t i = 0; i < n; ++i)
      g[i] = c.grad * 2.0 * (x[i] - t[i]) / den;
    return {s / den, G};
  }
  const std::int64_t N = c.shape[0], C = c.shape[1];
  std::int64_t S = 1;
  for (std::size_t d = 2; d < c.shape.size(); ++d)
    S *= c.shape[d];
  const double den = mean ? static_cast<double>(N * S) : 1.0;
  double loss = 0;
  for (std::int64_t a = 0; a < N; ++a)
    for (std::int64_t s = 0; s < S; ++s) {
      auto at = [&](std::int64_t k) { return (a * C + k) * S + s; };
      double z = 0;
      for (std::int64_t k = 0; k < C; ++k)
        z += std::exp(x[at(k)]);
      const double lse = std::log(z);
      double tsum = 0;
      for (std::int64_t k = 0; k < C; ++k) {
        loss -= t[at(k)] * (x[at(k)] - lse);
        tsum += t[at(k)];
      }
      for (std::int64_t k = 0; k < C; ++k)
        g[at(k)] = c.grad * (std::exp(x[at(k)]) / z * tsum - t[at(k)]) / den;
    }
  return {loss / den, G};
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  Tensor X = Tensor::rand(c.shape, DType::F64, c.seed);
  Tensor T = Tensor::rand(c.shape, DType::F64, c.seed + 1);
  for (std::int64_t i = 0; i < X.numel(); ++i) {
    X.data<double>()[i] *= 3;
    if (c.ce) T.data<double>()[i] = std::abs(T.data<double>()[i]);  // probabilities
  }
  X = X.to(dtype);
  T = T.to(dtype);
  const double tol = dtype == DType::F64 ? 1e-11 : 1e-4;
  const DTensor x = distribute_tensor(X, mesh, c.px);
  const DTensor t = distribute_tensor(T, mesh, c.pt);
  const auto [loss, G] = reference(c, X, T);

  const DTensor y = c.ce ? cross_entropy(x, t, c.reduction) : mse_loss(x, t, c.reduction);
  REQUIRE(y.ndim() == 0);
  CHECK(y.spec().is_replicated());
  const double got = y.to_local().item_flat(0);
  if (std::isnan(loss)) {
    CHECK(std::isnan(got));
  } else {
    INFO("loss " << got << " vs " << loss);
    CHECK(std::abs(got - loss) <= tol * std::max(1.0, std::abs(loss)));
  }

  DTensor gx = x;
  if (c.grad_as_dtensor) {
    // The loss's gradient as a 0-d DTensor, Partial on mesh dim 0.
    Placements gp(mesh_shape.size(), Replicate());
    gp[0] = Partial();
    const DTensor g = distribute_tensor(Tensor::full({}, c.grad, dtype), mesh, gp);
    gx = c.ce ? cross_entropy_backward(g, x, t, c.reduction)
              : mse_loss_backward(g, x, t, c.reduction);
  } else {
    gx = c.ce ? cross_entropy_backward(x, t, c.reduction, c.grad)
              : mse_loss_backward(x, t, c.reduction, c.grad);
  }
  for (std::size_t m = 0; m < mesh_shape.size(); ++m)
    if (!c.px[m].is_partial()) CHECK(gx.placements()[m] == c.px[m]);
  require_close(gx.full_tensor(), G, tol, "grad_input");
}

DTENSOR_TEST_REGISTRAR {
  struct Batch {
    Shape mesh;
    DType dtype;
    int configs;
  };
  for (bool ce : {false, true})
    for (const Batch& b :
         {Batch{{2}, DType::F64, 30}, Batch{{3}, DType::F64, 30}, Batch{{4}, DType::F64, 25},
          Batch{{2, 2}, DType::F64, 25}, Batch{{2}, DType::F32, 10}}) {
      const std::string name = fmt::format("nn {} differential {} mesh {} ({} configs)",
                                           ce ? "cross_entropy" : "mse_loss", dtype_name(b.dtype),
                                           mesh_str(b.mesh), b.configs);
      register_test(name, "[nn][loss][mp]", [=] {
        RunOptions o;
        o.deadline = std::chrono::seconds(240);
        run_ranks(
            static_cast<int>(shape_numel(b.mesh)),
            [=](RankContext&) {
              Rng rng(std::hash<std::string>()(name));
              for (int k = 0; k < b.configs; ++k)
                check_case(random_case(rng, b.mesh, ce), b.mesh, b.dtype);
            },
            o);
      });
    }

  register_test("nn losses: class dim never sharded - errors", "[nn][loss][mp]", [] {
    run_ranks(2, [](RankContext&) {
      DeviceMesh mesh(DeviceType::CPU, {2});
      const DTensor x = distribute_tensor(Tensor::rand({3, 4, 2}, DType::F64, 1), mesh, {Shard(1)});
      const DTensor t = distribute_tensor(Tensor::rand({3, 4, 2}, DType::F64, 2), mesh, {Shard(1)});
      CHECK(cross_entropy(x, t).spec().is_replicated());
      CHECK(cross_entropy_backward(x, t).placements() == Placements{Shard(1)});
      // mse_loss keeps Shard(1): no exchange of inputs, one all-reduce of the sum.
      CHECK(mse_loss(x, t).spec().is_replicated());
      const DTensor bad = distribute_tensor(Tensor::rand({3, 4}, DType::F64, 2), mesh, {Shard(0)});
      CHECK_THROWS_WITH(mse_loss(x, bad), Catch::Contains("shape"));
      const DTensor v = distribute_tensor(Tensor::rand({5}, DType::F64, 2), mesh, {Shard(0)});
      CHECK_THROWS_WITH(cross_entropy(v, v), Catch::Contains("[N, C"));
    });
  });
}

}  // namespace
