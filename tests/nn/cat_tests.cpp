// cat of 2-3 inputs along dims 0..3 against a naive f64 concatenation, with
// the inputs placed alike or differently (sharded along the cat dim or
// others, nested, replicated, Partial), on meshes 2, 3, 4 and 2x2; and
// cat_backward's pieces, placed like each input.
#include <fmt/format.h>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/cat.h"
#include "dtensor/ops/dispatch.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

struct Case {
  std::vector<Shape> shapes;
  std::vector<Placements> placements;
  std::int64_t dim = 0;   // as passed (may be negative)
  std::int64_t cdim = 0;  // normalised
  std::uint64_t seed = 0;
  std::string str() const {
    std::string s = fmt::format("cat dim {} seed {}:", dim, seed);
    for (std::size_t i = 0; i < shapes.size(); ++i)
      s += fmt::format(" {} {}", shape_str(shapes[i]), placements_str(placements[i]));
    return s;
  }
};

Case random_case(Rng& rng, const Shape& mesh) {
  Case c;
  c.seed = rng();
  const std::int64_t ndim = uni(rng, 1, 4);
  c.cdim = uni(rng, 0, ndim - 1);
  c.dim = uni(rng, 0, 3) == 0 ? c.cdim - ndim : c.cdim;
  Shape base;
  for (std::int64_t d = 0; d < ndim; ++d)
    base.push_back(uni(rng, 0, 9) == 0 ? 0 : uni(rng, 1, 5));
  const std::int64_t n = uni(rng, 2, 3);
  const bool alike = uni(rng, 0, 2) == 0;
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < ndim; ++d)
    dims.push_back(d);
  std::vector<std::int64_t> other;
  for (std::int64_t d = 0; d < ndim; ++d)
    if (d != c.cdim) other.push_back(d);
  const Placements shared = random_placements(rng, mesh, alike && !other.empty() ? other : dims, 70,
                                              10, uni(rng, 0, 3) == 0);
  for (std::int64_t i = 0; i < n; ++i) {
    Shape s = base;
    s[static_cast<std::size_t>(c.cdim)] = uni(rng, 0, 4) == 0 ? 0 : uni(rng, 1, 6);
    c.shapes.push_back(s);
    c.placements.push_back(alike ? shared
                                 : random_placements(rng, mesh, dims, 70, 10, uni(rng, 0, 3) == 0));
  }
  return c;
}

Tensor ref_cat(const std::vector<Tensor>& xs, std::int64_t dim) {
  Shape out = xs[0].shape();
  out[static_cast<std::size_t>(dim)] = 0;
  for (const auto& x : xs)
    out[static_cast<std::size_t>(dim)] += x.shape()[static_cast<std::size_t>(dim)];
  Tensor Y = Tensor::zeros(out, DType::F64);
  const Shape ys = strides_of(out);
  std::int64_t at = 0;
  for (const auto& x_ : xs) {
    const Tensor x = x_.to(DType::F64);
    const Shape xs_ = strides_of(x.shape());
    for (std::int64_t f = 0; f < x.numel(); ++f) {
      std::int64_t rem = f, o = 0;
      for (std::size_t k = 0; k < x.shape().size(); ++k) {
        std::int64_t i = rem / xs_[k];
        rem %= xs_[k];
        if (static_cast<std::int64_t>(k) == dim) i += at;
        o += i * ys[k];
      }
      Y.data<double>()[o] = x.data<double>()[f];
    }
    at += x.shape()[static_cast<std::size_t>(dim)];
  }
  return Y;
}

// Piece `i` of `Y` along dim (naive copy).
Tensor ref_piece(const Tensor& Y_, std::int64_t dim, std::int64_t start, const Shape& shape) {
  const Tensor Y = Y_.to(DType::F64);
  Tensor P = Tensor::zeros(shape, DType::F64);
  const Shape ps = strides_of(shape), ys = strides_of(Y.shape());
  for (std::int64_t f = 0; f < P.numel(); ++f) {
    std::int64_t rem = f, o = 0;
    for (std::size_t k = 0; k < shape.size(); ++k) {
      std::int64_t i = rem / ps[k];
      rem %= ps[k];
      if (static_cast<std::int64_t>(k) == dim) i += start;
      o += i * ys[k];
    }
    P.data<double>()[f] = Y.data<double>()[o];
  }
  return P;
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  std::vector<Tensor> X;
  std::vector<DTensor> x;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    X.push_back(Tensor::rand(c.shapes[i], dtype, c.seed + i));
    x.push_back(distribute_tensor(X.back(), mesh, c.placements[i]));
  }
  const DTensor y = cat(x, c.dim);
  // Never sharded along the cat dim; inputs alike off the cat dim stay put.
  for (const Placement& p : y.placements())
    CHECK(!(p.is_shard() && p.dim() == c.cdim));
  bool alike = true;
  for (const auto& p : c.placements)
    alike = alike && p == c.placements[0];
  bool cat_dim_sharded = false;
  for (const Placement& p : c.placements[0])
    cat_dim_sharded = cat_dim_sharded || (p.is_shard() && p.dim() == c.cdim);
  // (With an empty tensor every placement costs nothing: any may be chosen.)
  bool empty = false;
  for (const auto& s : c.shapes)
    empty = empty || shape_numel(s) == 0;
  if (alike && !cat_dim_sharded && !empty) CHECK(y.placements() == c.placements[0]);
  const Tensor Y = ref_cat(X, c.cdim);
  require_close(y.full_tensor(), Y, 0, "output");

  const Tensor GY = Tensor::rand(Y.shape(), dtype, c.seed + 7);
  const DTensor gy = distribute_tensor(GY, mesh, y.placements());
  const auto gx = cat_backward(gy, x, c.dim);
  REQUIRE(gx.size() == x.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < gx.size(); ++i) {
    for (std::size_t m = 0; m < mesh_shape.size(); ++m)
      if (!c.placements[i][m].is_partial()) CHECK(gx[i].placements()[m] == c.placements[i][m]);
    require_close(gx[i].full_tensor(), ref_piece(GY, c.cdim, at, c.shapes[i]), 0, "grad piece");
    at += c.shapes[i][static_cast<std::size_t>(c.cdim)];
  }
}

DTENSOR_TEST_REGISTRAR {
  struct Batch {
    Shape mesh;
    DType dtype;
    int configs;
  };
  for (const Batch& b :
       {Batch{{2}, DType::F64, 30}, Batch{{3}, DType::F64, 30}, Batch{{4}, DType::F64, 25},
        Batch{{2, 2}, DType::F64, 25}, Batch{{2}, DType::BF16, 10}}) {
    const std::string name = fmt::format("nn cat differential {} mesh {} ({} configs)",
                                         dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[nn][cat][mp]", [=] {
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

  register_test("nn cat: local when alike - cheapest redistribution otherwise - errors",
                "[nn][cat][mp]", [] {
                  run_ranks(2, [](RankContext&) {
                    DeviceMesh mesh(DeviceType::CPU, {2});
                    const DTensor a =
                        distribute_tensor(Tensor::rand({4, 3, 5}, DType::F32, 1), mesh, {Shard(0)});
                    const DTensor b =
                        distribute_tensor(Tensor::rand({4, 2, 5}, DType::F32, 2), mesh, {Shard(0)});
                    reset_dispatch_stats();
                    const DTensor y = cat({a, b}, 1);
                    CHECK(y.placements() == Placements{Shard(0)});
                    CHECK(dispatch_stats().inputs_redistributed == 0);
                    CHECK(y.to_local().shape() == Shape{2, 5, 5});
                    // Sharded along the cat dim: moved to another dim, not gathered.
                    const DTensor c =
                        distribute_tensor(Tensor::rand({4, 3, 6}, DType::F32, 3), mesh, {Shard(0)});
                    const DTensor d =
                        distribute_tensor(Tensor::rand({2, 3, 6}, DType::F32, 4), mesh, {Shard(0)});
                    const DTensor z = cat({c, d}, 0);
                    CHECK(z.placements() != Placements{Replicate()});
                    CHECK_THROWS_WITH(cat({a, c}, 1), Catch::Contains("differs"));
                    CHECK_THROWS_WITH(cat({a, b}, 3), Catch::Contains("out of range"));
                  });
                });
}

}  // namespace
