// cross_entropy with class-index (i64) targets, ignore_index and
// label_smoothing, forward and backward (the _backward front end, a DTensor
// loss gradient, and autograd), against naive f64 loops written here with
// PyTorch's definitions, over seeded random shapes and placements of input
// and target (alike or not, the input sharded along any dim including the
// class dim, Partial inputs, uneven and empty shards) on 1, 2, 3 and 4 ranks
// and a 2x2 mesh; ignore_index hit, all positions ignored (NaN mean),
// and the refusals: an out-of-range index on one rank only (every rank
// throws), label_smoothing outside [0, 1], a non-negative ignore_index with
// probability targets, a Partial or non-i64 target, i64 inputs to other
// operators.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/losses.h"
#include "dtensor/ops/pointwise.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;
using Catch::Contains;

namespace {

struct Case {
  Shape shape;  // the input's [N, C, d1, ...]
  Placements px, pt;
  CrossEntropyOptions options;
  int ignored_every = 5;  // about one target in this many is ignore_index
  double grad = 1.0;
  std::uint64_t seed = 0;
  std::string str() const {
    return fmt::format(
        "shape {} input {} target {} {} ignore_index {} label_smoothing {} grad {} "
        "seed {}",
        shape_str(shape), placements_str(px), placements_str(pt),
        loss_reduction_name(options.reduction), options.ignore_index, options.label_smoothing, grad,
        seed);
  }
};

Shape without_classes(const Shape& s) {
  Shape t = s;
  t.erase(t.begin() + 1);
  return t;
}

Case random_case(Rng& rng, const Shape& mesh) {
  Case c;
  c.seed = rng();
  const std::int64_t ndim = uni(rng, 2, 4);
  for (std::int64_t d = 0; d < ndim; ++d)
    c.shape.push_back(d == 1                 ? uni(rng, 1, 6)
                      : uni(rng, 0, 15) == 0 ? 0
                                             : uni(rng, 1, ndim <= 2 ? 9 : 5));
  const std::int64_t C = c.shape[1];
  std::vector<std::int64_t> dims, tdims;
  for (std::int64_t d = 0; d < ndim; ++d)
    dims.push_back(d);
  for (std::int64_t d = 0; d + 1 < ndim; ++d)
    tdims.push_back(d);
  c.px = random_placements(rng, mesh, dims, 75, 10, uni(rng, 0, 4) == 0);
  if (uni(rng, 0, 1)) {
    // The target placed like the input's other dims (no exchange needed).
    for (const Placement& p : c.px)
      c.pt.push_back(p.is_shard() && p.dim() != 1 ? Placement(Shard(p.dim() == 0 ? 0 : p.dim() - 1))
                                                  : Placement(Replicate()));
  } else {
    c.pt = random_placements(rng, mesh, tdims, 75, 0, false);
  }
  c.options.reduction = uni(rng, 0, 2) ? LossReduction::Mean : LossReduction::Sum;
  switch (uni(rng, 0, 3)) {
    case 0:
      c.options.ignore_index = uni(rng, 0, C - 1);  // a class: hit by the draws themselves
      break;
    case 1:
      c.options.ignore_index = -1;
      break;
    default:
      break;  // -100
  }
  const double smoothing[] = {0.0, 0.0, 0.1, 0.25, 1.0};
  c.options.label_smoothing = smoothing[uni(rng, 0, 4)];
  c.ignored_every = static_cast<int>(uni(rng, 3, 8));
  c.grad = uni(rng, 0, 1) ? 1.0 : 0.25 * static_cast<double>(uni(rng, -8, 8));
  return c;
}

// Class indices in [0, C), about one in `every` set to ignore_index.
Tensor random_target(const Shape& shape, std::int64_t C, std::int64_t ignore_index, int every,
                     std::uint64_t seed) {
  Tensor t = Tensor::empty(without_classes(shape), DType::I64);
  Rng rng(seed);
  auto* p = t.data<std::int64_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = uni(rng, 0, every - 1) == 0 ? ignore_index : uni(rng, 0, C - 1);
  return t;
}

// torch's loss and d loss / d input (times grad), naively.
std::pair<double, Tensor> reference(const Case& c, const Tensor& X_, const Tensor& T) {
  const Tensor X = X_.to(DType::F64);
  const double* x = X.data<double>();
  const std::int64_t* t = T.data<std::int64_t>();
  Tensor G = Tensor::zeros(c.shape, DType::F64);
  double* g = G.data<double>();
  const std::int64_t N = c.shape[0], C = c.shape[1];
  std::int64_t S = 1;
  for (std::size_t d = 2; d < c.shape.size(); ++d)
    S *= c.shape[d];
  const double s = c.options.label_smoothing;
  double loss = 0, counted = 0;
  for (std::int64_t a = 0; a < N; ++a)
    for (std::int64_t p = 0; p < S; ++p) {
      const std::int64_t target = t[a * S + p];
      if (target == c.options.ignore_index) continue;
      REQUIRE((target >= 0 && target < C));
      auto at = [&](std::int64_t k) { return (a * C + k) * S + p; };
      double z = 0;
      for (std::int64_t k = 0; k < C; ++k)
        z += std::exp(x[at(k)]);
      const double lse = std::log(z);
      double smooth = 0;
      for (std::int64_t k = 0; k < C; ++k)
        smooth += lse - x[at(k)];
      loss += (1 - s) * (lse - x[at(target)]) + s / static_cast<double>(C) * smooth;
      counted += 1;
      for (std::int64_t k = 0; k < C; ++k)
        g[at(k)] = c.grad *
                   (std::exp(x[at(k)]) / z - (1 - s) * (k == target) - s / static_cast<double>(C));
    }
  const bool mean = c.options.reduction == LossReduction::Mean;
  const double den = mean ? counted : 1.0;
  if (mean && counted > 0)
    for (std::int64_t i = 0; i < G.numel(); ++i)
      g[i] /= den;
  return {mean ? loss / den : loss, G};
}

double tolerance(DType dtype) {
  return dtype == DType::F64 ? 1e-11 : dtype == DType::F32 ? 1e-4 : 2e-2;
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str() << " dtype " << dtype_name(dtype));
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  Tensor X = Tensor::rand(c.shape, DType::F64, c.seed);
  for (std::int64_t i = 0; i < X.numel(); ++i)
    X.data<double>()[i] *= 3;
  X = X.to(dtype);
  const Tensor T =
      random_target(c.shape, c.shape[1], c.options.ignore_index, c.ignored_every, c.seed + 1);
  const double tol = tolerance(dtype);
  const DTensor x = distribute_tensor(X, mesh, c.px);
  const DTensor t = distribute_tensor(T, mesh, c.pt);
  const auto [loss, G] = reference(c, X, T);

  const DTensor y = cross_entropy(x, t, c.options);
  REQUIRE(y.ndim() == 0);
  CHECK(y.dtype() == dtype);
  CHECK(y.spec().is_replicated());
  const double got = y.to_local().item_flat(0);
  if (std::isnan(loss)) {
    CHECK(std::isnan(got));
  } else {
    INFO("loss " << got << " vs " << loss);
    CHECK(std::abs(got - loss) <= tol * std::max(1.0, std::abs(loss)));
  }

  // Without options (PyTorch's defaults), an i64 target is class indices too.
  if (c.options.ignore_index == -100 && c.options.label_smoothing == 0.0) {
    const double plain = cross_entropy(x, t, c.options.reduction).to_local().item_flat(0);
    CHECK(((std::isnan(plain) && std::isnan(got)) || plain == got));
    require_close(cross_entropy_backward(x, t, c.options.reduction, c.grad).full_tensor(), G, tol,
                  "grad_input (no options)");
  }

  const DTensor gx = cross_entropy_backward(x, t, c.options, c.grad);
  for (std::size_t m = 0; m < mesh_shape.size(); ++m)
    if (!c.px[m].is_partial()) CHECK(gx.placements()[m] == c.px[m]);
  require_close(gx.full_tensor(), G, tol, "grad_input");

  // The loss's gradient as a 0-d DTensor, Partial on mesh dim 0.
  Placements gp(mesh_shape.size(), Replicate());
  gp[0] = Partial();
  const DTensor g = distribute_tensor(Tensor::full({}, c.grad, dtype), mesh, gp);
  require_close(cross_entropy_backward(g, x, t, c.options).full_tensor(), G, tol,
                "grad_input (DTensor grad)");

  // Autograd: the forward recorded, its gradient through the _backward operator.
  DTensor leaf = x;
  leaf.requires_grad_();
  backward(scale(cross_entropy(leaf, t, c.options), c.grad));
  REQUIRE(leaf.grad().has_value());
  require_close(leaf.grad()->full_tensor(), G, tol, "autograd grad_input");
}

// Runs `body` expecting InvalidArgument whose message contains `needle`.
template <typename F>
void refused(F&& body, const std::string& needle) {
  try {
    body();
    FAIL("not refused; expected a message with " << needle);
  } catch (const InvalidArgument& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

DTENSOR_TEST_REGISTRAR {
  struct Batch {
    Shape mesh;
    DType dtype;
    int configs;
  };
  for (const Batch& b :
       {Batch{{1}, DType::F64, 25}, Batch{{2}, DType::F64, 30}, Batch{{3}, DType::F64, 25},
        Batch{{4}, DType::F64, 20}, Batch{{2, 2}, DType::F64, 30}, Batch{{2}, DType::F32, 10},
        Batch{{2, 2}, DType::BF16, 6}}) {
    const std::string name =
        fmt::format("nn cross_entropy loss class indices differential {} mesh {} ({} configs)",
                    dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[nn][loss][mp]", [=] {
      RunOptions o;
      o.deadline = std::chrono::seconds(240);
      run_ranks(
          static_cast<int>(shape_numel(b.mesh)),
          [=](RankContext&) {
            Rng rng(std::hash<std::string>()(name));
            for (int k = 0; k < b.configs; ++k)
              check_case(random_case(rng, b.mesh), b.mesh, b.dtype);
          },
          o);
    });
  }

  // Chosen cases: the sharded dims the loss runs over (batch, a spatial dim
  // that splits unevenly, both on a 2x2 mesh), ignore_index hit, every
  // position ignored (the mean is 0 / 0: NaN, its gradient 0, as PyTorch).
  register_test("nn cross_entropy loss class indices chosen placements 2x2", "[nn][loss][mp]", [] {
    run_ranks(4, [](RankContext&) {
      const Shape mesh{2, 2};
      const Shape shape{3, 4, 5, 3};
      struct Chosen {
        Placements px, pt;
      };
      for (const Chosen& ch : {Chosen{{Shard(0), Shard(2)}, {Shard(0), Shard(1)}},
                               Chosen{{Shard(2), Shard(3)}, {Replicate(), Replicate()}},
                               Chosen{{Shard(1), Partial()}, {Shard(1), Shard(0)}},
                               Chosen{{Replicate(), Shard(2)}, {Shard(2), Replicate()}}}) {
        for (const std::int64_t ignore : {std::int64_t{-100}, std::int64_t{2}})
          for (const double s : {0.0, 0.3}) {
            Case c;
            c.shape = shape;
            c.px = ch.px;
            c.pt = ch.pt;
            c.options.ignore_index = ignore;
            c.options.label_smoothing = s;
            c.ignored_every = 4;
            c.seed = 7;
            check_case(c, mesh, DType::F64);
          }
      }
    });
  });

  register_test("nn cross_entropy loss class indices every position ignored", "[nn][loss][mp]", [] {
    run_ranks(2, [](RankContext&) {
      DeviceMesh mesh(DeviceType::CPU, {2});
      const DTensor x = distribute_tensor(Tensor::rand({5, 3, 2}, DType::F64, 3), mesh, {Shard(0)});
      const DTensor t = distribute_tensor(Tensor::full({5, 2}, -100, DType::I64), mesh, {Shard(0)});
      CrossEntropyOptions o;
      o.label_smoothing = 0.2;
      CHECK(std::isnan(cross_entropy(x, t, o).to_local().item_flat(0)));
      CHECK(max_abs(cross_entropy_backward(x, t, o).full_tensor()) == 0.0);
      o.reduction = LossReduction::Sum;
      CHECK(cross_entropy(x, t, o).to_local().item_flat(0) == 0.0);
      // An empty batch: the mean is NaN too.
      const DTensor e = distribute_tensor(Tensor::rand({0, 3}, DType::F64, 3), mesh, {Shard(0)});
      const DTensor te = distribute_tensor(Tensor::zeros({0}, DType::I64), mesh, {Shard(0)});
      CHECK(std::isnan(cross_entropy(e, te, CrossEntropyOptions{}).to_local().item_flat(0)));
    });
  });

  // An index out of range on one rank's shard only: every rank refuses,
  // naming the target, forward and backward alike.
  for (const Shape& mesh_shape : {Shape{2}, Shape{2, 2}})
    register_test(
        fmt::format("nn cross_entropy loss class indices out of range refused on every rank "
                    "mesh {}",
                    mesh_str(mesh_shape)),
        "[nn][loss][mp]", [mesh_shape] {
          run_ranks(static_cast<int>(shape_numel(mesh_shape)), [&](RankContext&) {
            DeviceMesh mesh(DeviceType::CPU, mesh_shape);
            Tensor T = Tensor::zeros({6, 5}, DType::I64);
            T.data<std::int64_t>()[29] = 4;  // C is 4: the last rank's shard
            const Placements px =
                mesh_shape.size() == 1 ? Placements{Shard(0)} : Placements{Shard(0), Shard(2)};
            const Placements pt =
                mesh_shape.size() == 1 ? Placements{Shard(0)} : Placements{Shard(0), Shard(1)};
            const DTensor x = distribute_tensor(Tensor::rand({6, 4, 5}, DType::F64, 1), mesh, px);
            const DTensor t = distribute_tensor(T, mesh, pt);
            refused([&] { cross_entropy(x, t, CrossEntropyOptions{}); },
                    "target: 1 class index lies outside [0, 4)");
            refused([&] { cross_entropy_backward(x, t, CrossEntropyOptions{}); }, "target:");
            T.data<std::int64_t>()[0] = -7;  // and another below, on rank 0
            const DTensor t2 = distribute_tensor(T, mesh, pt);
            refused([&] { cross_entropy(x, t2, CrossEntropyOptions{}); }, "from -7 to 4");
            // The calls after a refusal still pair up across ranks.
            CHECK(std::isfinite(
                cross_entropy(x, distribute_tensor(Tensor::zeros({6, 5}, DType::I64), mesh, pt),
                              CrossEntropyOptions{})
                    .to_local()
                    .item_flat(0)));
          });
        });

  register_test("nn cross_entropy loss options refused on every rank", "[nn][loss][mp]", [] {
    run_ranks(2, [](RankContext&) {
      DeviceMesh mesh(DeviceType::CPU, {2});
      const DTensor x = distribute_tensor(Tensor::rand({4, 3, 2}, DType::F64, 1), mesh, {Shard(0)});
      const DTensor t = distribute_tensor(Tensor::zeros({4, 2}, DType::I64), mesh, {Shard(0)});
      const DTensor p = distribute_tensor(Tensor::rand({4, 3, 2}, DType::F64, 2), mesh, {Shard(0)});
      for (const double s : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
        refused([&] { cross_entropy(x, t, {.label_smoothing = s}); }, "label_smoothing");
        refused([&] { cross_entropy(x, p, {.label_smoothing = s}); }, "label_smoothing");
      }
      refused([&] { cross_entropy(x, p, {.ignore_index = 1}); }, "ignore_index");
      // Probability targets with smoothing are the smoothed target's loss.
      const CrossEntropyOptions smooth{.label_smoothing = 0.3};
      const DTensor smoothed = scale(p, 0.7) + 0.1;
      CHECK(std::abs(cross_entropy(x, p, smooth).to_local().item_flat(0) -
                     cross_entropy(x, smoothed).to_local().item_flat(0)) < 1e-12);
      CHECK(max_abs_diff(cross_entropy_backward(x, p, smooth).full_tensor(),
                         cross_entropy_backward(x, smoothed).full_tensor()) < 1e-12);
      // The target's shape, dtype and placement.
      const DTensor t3 = distribute_tensor(Tensor::zeros({4, 3}, DType::I64), mesh, {Shard(0)});
      refused([&] { cross_entropy(x, t3, CrossEntropyOptions{}); }, "target: shape");
      const DTensor tp = distribute_tensor(Tensor::zeros({4, 2}, DType::I64), mesh, {Partial()});
      refused([&] { cross_entropy(x, tp, CrossEntropyOptions{}); }, "target: placements");
      // i64 inputs to floating operators: refused by name, before any kernel.
      const DTensor xi = distribute_tensor(Tensor::zeros({4, 3, 2}, DType::I64), mesh, {Shard(0)});
      refused([&] { cross_entropy(xi, t, CrossEntropyOptions{}); }, "input: i64");
      refused([&] { mse_loss(xi, xi); }, "argument 0");
      refused([&] { add(t, t); }, "i64");
      refused([&] { cross_entropy(xi, xi); }, "i64");
    });
  });
}

}  // namespace
