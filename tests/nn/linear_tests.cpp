// linear, forward and backward, against naive f64 loops written here, over
// seeded random shapes (1 to 4 dims) and input placements (sharded along any
// dim, the feature dim included, uneven and empty shards, Partial) on 1 rank
// and meshes 2, 3 and 2x2, with and without a bias; the weight's and bias's
// gradients summed over every rank's rows and replicated; autograd; the
// refusals of mismatched shapes naming the argument on every rank.
#include <fmt/format.h>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/linear.h"
#include "dtensor/ops/pointwise.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

struct Naive {
  Tensor y, gx, gw, gb;
};

// y = x w^T + b; gx = g w; gw = g^T x; gb = sum of g's rows.
Naive naive(const Tensor& X_, const Tensor& W_, const Tensor& B_, const Tensor& G_) {
  const Tensor X = X_.to(DType::F64), W = W_.to(DType::F64), G = G_.to(DType::F64);
  const std::int64_t in = W.shape()[1], K = W.shape()[0];
  const std::int64_t rows = shape_numel(Shape(X.shape().begin(), X.shape().end() - 1));
  Shape ys = X.shape();
  ys.back() = K;
  Naive r{Tensor::zeros(ys, DType::F64), Tensor::zeros(X.shape(), DType::F64),
          Tensor::zeros(W.shape(), DType::F64), Tensor::zeros({K}, DType::F64)};
  const double* x = X.data<double>();
  const double* w = W.data<double>();
  const double* g = G.data<double>();
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < K; ++k) {
      double s = B_.defined() ? B_.to(DType::F64).item_flat(k) : 0.0;
      for (std::int64_t j = 0; j < in; ++j) {
        s += x[i * in + j] * w[k * in + j];
        r.gx.data<double>()[i * in + j] += g[i * K + k] * w[k * in + j];
        r.gw.data<double>()[k * in + j] += g[i * K + k] * x[i * in + j];
      }
      r.y.data<double>()[i * K + k] = s;
      r.gb.data<double>()[k] += g[i * K + k];
    }
  return r;
}

void check_random(const Shape& mesh_shape, DType dtype, int configs, std::uint64_t salt) {
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  Rng rng(salt);
  const Placements all_r(mesh_shape.size(), Replicate());
  for (int c = 0; c < configs; ++c) {
    const std::int64_t ndim = uni(rng, 1, 4);
    Shape xs;
    for (std::int64_t d = 0; d < ndim; ++d)
      xs.push_back(uni(rng, 0, 12) == 0 ? 0 : uni(rng, 1, ndim <= 2 ? 9 : 4));
    const std::int64_t in = xs.back(), K = uni(rng, 1, 6);
    const bool bias = uni(rng, 0, 2) != 0;
    std::vector<std::int64_t> dims;
    for (std::int64_t d = 0; d < ndim; ++d)
      dims.push_back(d);
    const Placements px = random_placements(rng, mesh_shape, dims, 75, 10, uni(rng, 0, 4) == 0);
    Shape ys = xs;
    ys.back() = K;
    const Tensor X = Tensor::rand(xs, DType::F64, rng()).to(dtype);
    const Tensor W = Tensor::rand({K, in}, DType::F64, rng()).to(dtype);
    const Tensor B = bias ? Tensor::rand({K}, DType::F64, rng()).to(dtype) : Tensor();
    const Tensor G = Tensor::rand(ys, DType::F64, rng()).to(dtype);
    INFO(fmt::format("input {} {} K {} bias {}", shape_str(xs), placements_str(px), K, bias));
    const double tol = dtype == DType::F64 ? 1e-12 : 1e-4;
    const Naive want = naive(X, W, B, G);

    const DTensor x = distribute_tensor(X, mesh, px);
    const DTensor w = distribute_tensor(W, mesh, all_r);
    const std::optional<DTensor> b =
        bias ? std::optional<DTensor>(distribute_tensor(B, mesh, all_r)) : std::nullopt;
    const DTensor y = linear(x, w, b);
    REQUIRE(y.shape() == ys);
    // Row shards stay; the feature dim is gathered (Replicate); Partial is reduced.
    // (An empty tensor may take any placement: every strategy is free.)
    const bool empty = X.numel() == 0 || G.numel() == 0;
    for (std::size_t m = 0; m < mesh_shape.size() && !empty; ++m)
      if (px[m].is_shard() && px[m].dim() + 1 < ndim) CHECK(y.placements()[m] == px[m]);
    require_close(y.full_tensor(), want.y, tol, "output");

    Placements pg = y.placements();
    for (auto& q : pg)
      if (q.is_partial()) q = Replicate();
    const DTensor g = distribute_tensor(G, mesh, pg);
    const LinearGrads r = linear_backward(g, x, w, bias);
    for (std::size_t m = 0; m < mesh_shape.size() && !empty; ++m)
      if (!px[m].is_partial()) CHECK(r.grad_input.placements()[m] == px[m]);
    CHECK(r.grad_weight.placements() == all_r);
    require_close(r.grad_input.full_tensor(), want.gx, tol, "grad_input");
    require_close(r.grad_weight.to_local(), want.gw, tol, "grad_weight (this rank's copy)");
    CHECK(r.grad_bias.has_value() == bias);
    if (bias) {
      CHECK(r.grad_bias->placements() == all_r);
      require_close(r.grad_bias->to_local(), want.gb, tol, "grad_bias (this rank's copy)");
    }
  }
}

void check_autograd(const Shape& mesh_shape) {
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Placements all_r(mesh_shape.size(), Replicate());
  // Rows sharded on mesh dim 0, features on dim 1 (if any): uneven both.
  Placements px(mesh_shape.size(), Replicate());
  px[0] = Shard(0);
  if (px.size() > 1) px[1] = Shard(2);
  const Tensor X = Tensor::rand({5, 2, 7}, DType::F64, 1);
  const Tensor W = Tensor::rand({3, 7}, DType::F64, 2);
  const Tensor B = Tensor::rand({3}, DType::F64, 3);
  const Tensor R = Tensor::rand({5, 2, 3}, DType::F64, 4);
  DTensor x = distribute_tensor(X, mesh, px);
  DTensor w = distribute_tensor(W, mesh, all_r);
  DTensor b = distribute_tensor(B, mesh, all_r);
  for (DTensor* t : {&x, &w, &b})
    t->requires_grad_();
  const DTensor y = linear(x, w, b);
  backward(sum(mul(y, distribute_tensor(R, mesh, y.placements()))));
  const Naive want = naive(X, W, B, R);
  REQUIRE(x.grad().has_value());
  REQUIRE(w.grad().has_value());
  REQUIRE(b.grad().has_value());
  CHECK(x.grad()->placements() == px);
  CHECK(w.grad()->placements() == all_r);
  require_close(x.grad()->full_tensor(), want.gx, 1e-12, "x.grad");
  require_close(w.grad()->to_local(), want.gw, 1e-12, "w.grad");
  require_close(b.grad()->to_local(), want.gb, 1e-12, "b.grad");
}

DTENSOR_TEST_REGISTRAR {
  struct Batch {
    Shape mesh;
    DType dtype;
    int configs;
  };
  for (const Batch& b :
       {Batch{{1}, DType::F64, 15}, Batch{{2}, DType::F64, 25}, Batch{{3}, DType::F64, 20},
        Batch{{2, 2}, DType::F64, 25}, Batch{{2}, DType::F32, 10}}) {
    const std::string name = fmt::format("nn linear differential {} mesh {} ({} configs)",
                                         dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[nn][linear][mp]", [=] {
      RunOptions o;
      o.deadline = std::chrono::seconds(240);
      run_ranks(
          static_cast<int>(shape_numel(b.mesh)),
          [=](RankContext&) {
            check_random(b.mesh, b.dtype, b.configs, std::hash<std::string>()(name));
          },
          o);
    });
  }
  for (const Shape& mesh : {Shape{1}, Shape{2}, Shape{2, 2}})
    register_test(fmt::format("nn linear autograd mesh {}", mesh_str(mesh)), "[nn][linear][mp]",
                  [=] {
                    run_ranks(static_cast<int>(shape_numel(mesh)),
                              [=](RankContext&) { check_autograd(mesh); });
                  });
  register_test(
      "nn linear: mismatched shapes and dtypes - errors on every rank", "[nn][linear][mp]", [] {
        run_ranks(2, [](RankContext&) {
          DeviceMesh mesh(DeviceType::CPU, {2});
          const Placements r{Replicate()};
          const DTensor x =
              distribute_tensor(Tensor::rand({4, 5}, DType::F64, 1), mesh, {Shard(0)});
          const DTensor w = distribute_tensor(Tensor::rand({3, 5}, DType::F64, 2), mesh, r);
          const DTensor w_bad = distribute_tensor(Tensor::rand({3, 4}, DType::F64, 2), mesh, r);
          const DTensor b_bad = distribute_tensor(Tensor::rand({4}, DType::F64, 3), mesh, r);
          const DTensor w_f32 = distribute_tensor(Tensor::rand({3, 5}, DType::F32, 2), mesh, r);
          CHECK_THROWS_WITH(linear(x, w_bad), Catch::Contains("weight"));
          CHECK_THROWS_WITH(linear(x, w, b_bad), Catch::Contains("bias"));
          CHECK_THROWS_WITH(linear(x, w_f32), Catch::Contains("weight: dtype"));
        });
      });
}

}  // namespace
