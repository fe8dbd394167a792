// l1_loss, smooth_l1_loss, huber_loss and binary_cross_entropy_with_logits,
// forward and backward, against naive f64 loops written here (from the
// definitions, not the library's stable forms), over seeded random shapes
// and placements of input and target (alike or not, sharded along any dim,
// uneven and empty shards, Partial) on 1 rank and meshes 2, 3 and 2x2;
// reductions mean and sum; beta and delta on both sides of the differences;
// the loss's gradient 1 or given; autograd's input and target gradients; the
// refusals of a bad beta or delta on every rank.
#include <fmt/format.h>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/losses.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

enum class Kind { L1, SmoothL1, Huber, Bce };
constexpr Kind kKinds[] = {Kind::L1, Kind::SmoothL1, Kind::Huber, Kind::Bce};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::L1:
      return "l1_loss";
    case Kind::SmoothL1:
      return "smooth_l1_loss";
    case Kind::Huber:
      return "huber_loss";
    case Kind::Bce:
      return "binary_cross_entropy_with_logits";
  }
  return "?";
}

struct Case {
  Kind kind = Kind::L1;
  Shape shape;
  Placements px, pt;
  LossReduction reduction = LossReduction::Mean;
  double param = 1.0;  // beta or delta
  double grad = 1.0;
  std::uint64_t seed = 0;
  std::string str() const {
    return fmt::format("{} shape {} input {} target {} {} param {} grad {} seed {}",
                       kind_name(kind), shape_str(shape), placements_str(px), placements_str(pt),
                       loss_reduction_name(reduction), param, grad, seed);
  }
};

Case random_case(Rng& rng, const Shape& mesh, Kind kind) {
  Case c;
  c.kind = kind;
  c.seed = rng();
  const std::int64_t ndim = uni(rng, 1, 4);
  for (std::int64_t d = 0; d < ndim; ++d)
    c.shape.push_back(uni(rng, 0, 15) == 0 ? 0 : uni(rng, 1, ndim <= 2 ? 9 : 4));
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < ndim; ++d)
    dims.push_back(d);
  c.px = random_placements(rng, mesh, dims, 75, 10, uni(rng, 0, 4) == 0);
  c.pt = uni(rng, 0, 1) ? c.px : random_placements(rng, mesh, dims, 75, 10, false);
  c.reduction = uni(rng, 0, 2) ? LossReduction::Mean : LossReduction::Sum;
  // The differences are in (-4, 3): these cut them in both regimes (and
  // smooth_l1's beta 0 is l1).
  const double params[] = {1.0, 0.5, 2.0, 0.0};
  c.param = params[uni(rng, 0, kind == Kind::SmoothL1 ? 3 : 2)];
  c.grad = uni(rng, 0, 1) ? 1.0 : 0.25 * static_cast<double>(uni(rng, -8, 8));
  return c;
}

// Inputs in [-3, 3) (logits of both signs; rand is uniform in [-1, 1)).
Tensor inputs(const Shape& shape, std::uint64_t seed) {
  Tensor X = Tensor::rand(shape, DType::F64, seed);
  for (std::int64_t i = 0; i < X.numel(); ++i)
    X.data<double>()[i] *= 3;
  return X;
}
// Targets in [0, 1) (bce's probabilities).
Tensor targets(const Shape& shape, std::uint64_t seed) {
  Tensor T = Tensor::rand(shape, DType::F64, seed);
  for (std::int64_t i = 0; i < T.numel(); ++i)
    T.data<double>()[i] = (1 + T.data<double>()[i]) / 2;
  return T;
}

// One element's term and its derivative by x, from the definitions.
std::pair<double, double> term(Kind k, double x, double t, double p) {
  const double d = x - t, a = std::abs(d);
  const double sign = d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0;
  switch (k) {
    case Kind::L1:
      return {a, sign};
    case Kind::SmoothL1:
      if (p == 0 || a >= p) return {a - 0.5 * p, sign};
      return {0.5 * d * d / p, d / p};
    case Kind::Huber:
      if (a >= p) return {p * (a - 0.5 * p), p * sign};
      return {0.5 * d * d, d};
    case Kind::Bce: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return {-(t * std::log(s) + (1 - t) * std::log(1 - s)), s - t};
    }
  }
  return {NAN, NAN};
}

// Loss and d loss / d input (times grad), naively.
std::pair<double, Tensor> reference(const Case& c, const Tensor& X_, const Tensor& T_) {
  const Tensor X = X_.to(DType::F64), T = T_.to(DType::F64);
  Tensor G = Tensor::zeros(c.shape, DType::F64);
  const std::int64_t n = X.numel();
  const double den = c.reduction == LossReduction::Mean ? static_cast<double>(n) : 1.0;
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto [v, dv] = term(c.kind, X.data<double>()[i], T.data<double>()[i], c.param);
    s += v;
    G.data<double>()[i] = c.grad * dv / den;
  }
  return {s / den, G};
}

DTensor forward(const Case& c, const DTensor& x, const DTensor& t) {
  switch (c.kind) {
    case Kind::L1:
      return l1_loss(x, t, c.reduction);
    case Kind::SmoothL1:
      return smooth_l1_loss(x, t, c.reduction, c.param);
    case Kind::Huber:
      return huber_loss(x, t, c.reduction, c.param);
    case Kind::Bce:
      return binary_cross_entropy_with_logits(x, t, c.reduction);
  }
  throw std::logic_error("kind");
}

DTensor backward_of(const Case& c, const DTensor& x, const DTensor& t) {
  switch (c.kind) {
    case Kind::L1:
      return l1_loss_backward(x, t, c.reduction, c.grad);
    case Kind::SmoothL1:
      return smooth_l1_loss_backward(x, t, c.reduction, c.param, c.grad);
    case Kind::Huber:
      return huber_loss_backward(x, t, c.reduction, c.param, c.grad);
    case Kind::Bce:
      return binary_cross_entropy_with_logits_backward(x, t, c.reduction, c.grad);
  }
  throw std::logic_error("kind");
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Tensor X = inputs(c.shape, c.seed).to(dtype);
  const Tensor T = targets(c.shape, c.seed + 1).to(dtype);
  const double tol = dtype == DType::F64 ? 1e-11 : 1e-4;
  const DTensor x = distribute_tensor(X, mesh, c.px);
  const DTensor t = distribute_tensor(T, mesh, c.pt);
  const auto [loss, G] = reference(c, X, T);

  const DTensor y = forward(c, x, t);
  REQUIRE(y.ndim() == 0);
  CHECK(y.spec().is_replicated());
  const double got = y.to_local().item_flat(0);
  if (std::isnan(loss)) {
    CHECK(std::isnan(got));
  } else {
    INFO("loss " << got << " vs " << loss);
    CHECK(std::abs(got - loss) <= tol * std::max(1.0, std::abs(loss)));
  }
  const DTensor gx = backward_of(c, x, t);
  for (std::size_t m = 0; m < mesh_shape.size(); ++m)
    if (!c.px[m].is_partial()) CHECK(gx.placements()[m] == c.px[m]);
  require_close(gx.full_tensor(), G, tol, "grad_input");
}

// Through autograd: the input's gradient and, for the losses of x - t, the
// target's (its negation); bce refuses a target that needs a gradient.
void check_autograd(const Shape& mesh_shape) {
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Shape shape{5, 3, 7};
  Placements p(mesh_shape.size(), Replicate());
  p[0] = Shard(2);
  if (p.size() > 1) p[1] = Shard(0);
  for (Kind k : kKinds) {
    Case c;
    c.kind = k;
    c.shape = shape;
    c.param = 0.5;
    c.reduction = LossReduction::Sum;
    INFO(kind_name(k));
    const Tensor X = inputs(shape, 7);
    const Tensor T = targets(shape, 8);
    DTensor x = distribute_tensor(X, mesh, p);
    DTensor t = distribute_tensor(T, mesh, p);
    x.requires_grad_();
    if (k != Kind::Bce) t.requires_grad_();
    backward(forward(c, x, t));
    const auto [loss, G] = reference(c, X, T);
    REQUIRE(x.grad().has_value());
    CHECK(x.grad()->placements() == p);
    require_close(x.grad()->full_tensor(), G, 1e-12, "input grad");
    if (k != Kind::Bce) {
      REQUIRE(t.grad().has_value());
      Tensor negated = G.clone();
      for (std::int64_t i = 0; i < negated.numel(); ++i)
        negated.data<double>()[i] = -negated.data<double>()[i];
      require_close(t.grad()->full_tensor(), negated, 1e-12, "target grad");
    } else {
      DTensor x2 = distribute_tensor(X, mesh, p);
      DTensor t2 = distribute_tensor(T, mesh, p);
      t2.requires_grad_();
      CHECK_THROWS_WITH(backward(binary_cross_entropy_with_logits(x2, t2)),
                        Catch::Contains("target"));
    }
  }
}

DTENSOR_TEST_REGISTRAR {
  struct Batch {
    Shape mesh;
    DType dtype;
    int configs;
  };
  for (Kind kind : kKinds)
    for (const Batch& b :
         {Batch{{1}, DType::F64, 15}, Batch{{2}, DType::F64, 20}, Batch{{3}, DType::F64, 15},
          Batch{{2, 2}, DType::F64, 20}, Batch{{2}, DType::F32, 8}, Batch{{2}, DType::BF16, 4}}) {
      const std::string name =
          fmt::format("nn {} differential {} mesh {} ({} configs)", kind_name(kind),
                      dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
      register_test(name, "[nn][loss][mp]", [=] {
        RunOptions o;
        o.deadline = std::chrono::seconds(240);
        run_ranks(
            static_cast<int>(shape_numel(b.mesh)),
            [=](RankContext&) {
              Rng rng(std::hash<std::string>()(name));
              for (int k = 0; k < b.configs; ++k) {
                // bf16 keeps 8 bits: its check is the f32 one on bf16 data
                // with a tolerance for the one rounding of each gradient.
                Case c = random_case(rng, b.mesh, kind);
                if (b.dtype == DType::BF16) {
                  INFO(c.str());
                  DeviceMesh mesh(DeviceType::CPU, b.mesh);
                  const Tensor X = inputs(c.shape, c.seed).to(DType::BF16);
                  const Tensor T = targets(c.shape, c.seed + 1).to(DType::BF16);
                  const auto [loss, G] = reference(c, X, T);
                  const DTensor y = forward(c, distribute_tensor(X, mesh, c.px),
                                            distribute_tensor(T, mesh, c.pt));
                  const double got = y.to_local().item_flat(0);
                  if (!std::isnan(loss))
                    CHECK(std::abs(got - loss) <= 1e-2 * std::max(1.0, std::abs(loss)));
                  const DTensor gx = backward_of(c, distribute_tensor(X, mesh, c.px),
                                                 distribute_tensor(T, mesh, c.pt));
                  require_close(gx.full_tensor(), G, 1e-2, "grad_input bf16");
                } else {
                  check_case(c, b.mesh, b.dtype);
                }
              }
            },
            o);
      });
    }

  for (const Shape& mesh : {Shape{1}, Shape{2}, Shape{2, 2}})
    register_test(fmt::format("nn pointwise losses autograd mesh {}", mesh_str(mesh)),
                  "[nn][loss][mp]", [=] {
                    run_ranks(static_cast<int>(shape_numel(mesh)),
                              [=](RankContext&) { check_autograd(mesh); });
                  });

  register_test(
      "nn pointwise losses: bad beta, delta, shapes - errors on every rank", "[nn][loss][mp]", [] {
        run_ranks(2, [](RankContext&) {
          DeviceMesh mesh(DeviceType::CPU, {2});
          const DTensor x =
              distribute_tensor(Tensor::rand({3, 4}, DType::F64, 1), mesh, {Shard(0)});
          const DTensor t =
              distribute_tensor(Tensor::rand({3, 4}, DType::F64, 2), mesh, {Shard(1)});
          CHECK_THROWS_WITH(smooth_l1_loss(x, t, LossReduction::Mean, -0.5),
                            Catch::Contains("beta"));
          CHECK_THROWS_WITH(huber_loss(x, t, LossReduction::Mean, 0.0), Catch::Contains("delta"));
          CHECK_THROWS_WITH(huber_loss_backward(x, t, LossReduction::Sum, -1.0),
                            Catch::Contains("delta"));
          const DTensor bad =
              distribute_tensor(Tensor::rand({3, 5}, DType::F64, 2), mesh, {Shard(0)});
          CHECK_THROWS_WITH(l1_loss(x, bad), Catch::Contains("shape"));
          CHECK_THROWS_WITH(binary_cross_entropy_with_logits(x, bad), Catch::Contains("shape"));
          // Large logits: the stable form stays finite where the
          // naive one overflows.
          Tensor big = Tensor::zeros({2, 2}, DType::F64);
          big.data<double>()[0] = 800;
          big.data<double>()[1] = -800;
          const DTensor xb = distribute_tensor(big, mesh, {Shard(0)});
          const DTensor tb = distribute_tensor(Tensor::zeros({2, 2}, DType::F64), mesh, {Shard(0)});
          const double l =
              binary_cross_entropy_with_logits(xb, tb, LossReduction::Sum).to_local().item_flat(0);
          // 800 + 0 + log(2) + log(2): x = 800, -800, 0, 0 with t = 0.
          CHECK(std::abs(l - (800 + 2 * std::log(2.0))) < 1e-9);
        });
      });
}

}  // namespace
