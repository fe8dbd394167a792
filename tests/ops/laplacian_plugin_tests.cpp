// The window-engine example plugin (examples/plugin/laplacian_plugin.cpp),
// loaded at run time on 1, 2, 3 and 4 ranks: example::laplacian and its
// backward on 1-D meshes sharding H and on a 2x2 mesh sharding H and W, over
// seeded random shapes (uneven shards, shards left empty, 1 to 3 spatial
// dims), in every boundary mode, against the naive f64 loops below (which
// share no code with the plugin), to 1e-12 in f64.
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <array>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/plugin.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

const std::array<std::string, 4> kModes{"zeros", "reflect", "replicate", "circular"};

// The neighbour of index p (one step outside [0, L) at most) in `mode`, or
// nullopt when it reads zero.
std::optional<std::int64_t> source_index(std::int64_t p, std::int64_t L, const std::string& mode) {
  if (p >= 0 && p < L) return p;
  if (mode == "zeros") return std::nullopt;
  if (mode == "reflect") return p < 0 ? -p : 2 * (L - 1) - p;
  if (mode == "replicate") return p < 0 ? 0 : L - 1;
  return p < 0 ? p + L : p - L;  // circular
}

// [N, C, s0, s1, s2] with the absent spatial dims of length 1.
struct Box {
  std::int64_t n, c;
  std::array<std::int64_t, 3> s{1, 1, 1};
  int spatial;
  explicit Box(const Shape& shape)
      : n(shape[0]), c(shape[1]), spatial(static_cast<int>(shape.size()) - 2) {
    for (int d = 0; d < spatial; ++d)
      s[static_cast<std::size_t>(d)] = shape[static_cast<std::size_t>(d) + 2];
  }
  std::int64_t at(std::int64_t plane, std::int64_t i, std::int64_t j, std::int64_t k) const {
    return ((plane * s[0] + i) * s[1] + j) * s[2] + k;
  }
};

// y = sum over spatial dims of x[i-1] - 2 x[i] + x[i+1], in f64.
Tensor oracle_forward(const Tensor& x64, const std::string& mode) {
  const Tensor x = x64.contiguous();
  const Box b(x.shape());
  Tensor y = Tensor::zeros(x.shape(), DType::F64);
  const double* in = x.data<double>();
  double* out = y.data<double>();
  for (std::int64_t plane = 0; plane < b.n * b.c; ++plane)
    for (std::int64_t i = 0; i < b.s[0]; ++i)
      for (std::int64_t j = 0; j < b.s[1]; ++j)
        for (std::int64_t k = 0; k < b.s[2]; ++k) {
          double sum = 0;
          for (int d = 0; d < b.spatial; ++d) {
            const std::int64_t L = b.s[static_cast<std::size_t>(d)];
            const std::int64_t here = d == 0 ? i : d == 1 ? j : k;
            for (std::int64_t step : {-1, 1}) {
              const auto src = source_index(here + step, L, mode);
              if (!src) continue;
              const std::int64_t ii = d == 0 ? *src : i, jj = d == 1 ? *src : j,
                                 kk = d == 2 ? *src : k;
              sum += in[b.at(plane, ii, jj, kk)];
            }
            sum -= 2 * in[b.at(plane, i, j, k)];
          }
          out[b.at(plane, i, j, k)] = sum;
        }
  return y;
}

// The gradient of sum(g * y(x)) with respect to x: every output sends its
// gradient back to each element it read, with that element's coefficient.
Tensor oracle_backward(const Tensor& g64, const std::string& mode) {
  const Tensor g = g64.contiguous();
  const Box b(g.shape());
  Tensor gx = Tensor::zeros(g.shape(), DType::F64);
  const double* in = g.data<double>();
  double* out = gx.data<double>();
  for (std::int64_t plane = 0; plane < b.n * b.c; ++plane)
    for (std::int64_t i = 0; i < b.s[0]; ++i)
      for (std::int64_t j = 0; j < b.s[1]; ++j)
        for (std::int64_t k = 0; k < b.s[2]; ++k) {
          const double v = in[b.at(plane, i, j, k)];
          for (int d = 0; d < b.spatial; ++d) {
            const std::int64_t L = b.s[static_cast<std::size_t>(d)];
            const std::int64_t here = d == 0 ? i : d == 1 ? j : k;
            for (std::int64_t step : {-1, 1}) {
              const auto src = source_index(here + step, L, mode);
              if (!src) continue;
              const std::int64_t ii = d == 0 ? *src : i, jj = d == 1 ? *src : j,
                                 kk = d == 2 ? *src : k;
              out[b.at(plane, ii, jj, kk)] += v;
            }
            out[b.at(plane, i, j, k)] -= 2 * v;
          }
        }
  return gx;
}

using Rng = std::mt19937_64;
std::int64_t uni(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// A random [N, C, spatial...] shape with at least `min_spatial` spatial dims;
// the sharded dims are sometimes shorter than their mesh dim (empty shards).
Shape random_shape(Rng& rng, int min_spatial, const std::string& mode, std::int64_t P) {
  const std::int64_t spatial = uni(rng, min_spatial, 3);
  const std::int64_t max_len = spatial == 1 ? 17 : spatial == 2 ? 9 : 5;
  const std::int64_t min_len = mode == "reflect" ? 2 : 1;
  Shape s{uni(rng, 1, 2), uni(rng, 1, 3)};
  for (std::int64_t d = 0; d < spatial; ++d) {
    const bool narrow = uni(rng, 0, 3) == 0;
    s.push_back(narrow ? uni(rng, min_len, std::max(min_len, P - 1)) : uni(rng, min_len, max_len));
  }
  return s;
}

void check_case(const DeviceMesh& mesh, const Shape& shape, const Placements& placements,
                const std::string& mode, std::uint64_t seed) {
  INFO(fmt::format("shape {} placements {} mode {} seed {}", shape_str(shape),
                   placements_str(placements), mode, seed));
  const Tensor X = Tensor::rand(shape, DType::F64, seed);
  const Tensor G = Tensor::rand(shape, DType::F64, seed + 1);
  const DTensor x = distribute_tensor(X, mesh, placements);
  const DTensor g = distribute_tensor(G, mesh, placements);

  const DTensor y = dispatch("example::laplacian", {x, mode}).at(0);
  REQUIRE(y.placements() == placements);
  REQUIRE(y.shape() == shape);
  REQUIRE(max_abs_diff(y.full_tensor(), oracle_forward(X, mode)) < 1e-12);

  const DTensor gx = dispatch("example::laplacian_backward", {g, x, mode}).at(0);
  REQUIRE(gx.placements() == placements);
  REQUIRE(max_abs_diff(gx.full_tensor(), oracle_backward(G, mode)) < 1e-12);
}

void load() {
#ifdef DTENSOR_LAPLACIAN_PLUGIN
  load_plugin(DTENSOR_LAPLACIAN_PLUGIN);
#endif
  REQUIRE(has_op("example::laplacian"));
  REQUIRE(has_op("example::laplacian_backward"));
}

// Random cases on a 1-D mesh of P ranks: mostly H sharded, sometimes the
// batch, the channels, W or nothing.
void one_d_cases(std::int64_t P, std::uint64_t seed, int cases) {
  load();
  DeviceMesh mesh(DeviceType::CPU, {P});
  Rng rng(seed);
  for (int i = 0; i < cases; ++i) {
    const std::string& mode = kModes[static_cast<std::size_t>(i) % kModes.size()];
    const Shape shape = random_shape(rng, 1, mode, P);
    const std::int64_t pick = uni(rng, 0, 9);
    const auto ndim = static_cast<std::int64_t>(shape.size());
    const Placement p = pick < 7                  ? Placement(Shard(2))
                        : pick == 7               ? Placement(Shard(uni(rng, 0, 1)))
                        : pick == 8 && ndim > 3 ? Placement(Shard(3))
                                                  : Placement(Replicate());
    check_case(mesh, shape, {p}, mode, rng());
  }
}

}  // namespace

TEST_CASE("laplacian plugin on one rank, and its argument errors", "[plugin][laplacian]") {
#ifndef DTENSOR_LAPLACIAN_PLUGIN
  WARN("skipped: the examples (and so the plugin) are not built");
  return;
#else
  run_ranks(1, [](RankContext&) {
    one_d_cases(1, 11, 24);
    DeviceMesh mesh(DeviceType::CPU, {1});
    const DTensor x = distribute_tensor(Tensor::rand({1, 1, 4}, DType::F64, 1), mesh, {Shard(2)});
    // The boundary argument is optional (zeros).
    REQUIRE(max_abs_diff(dispatch("example::laplacian", {x}).at(0).full_tensor(),
                         oracle_forward(x.full_tensor(), "zeros")) < 1e-12);
    REQUIRE_THROWS_AS(dispatch("example::laplacian", {x, std::string("wrap")}), InvalidArgument);
    // Reflect needs two elements.
    const DTensor one = distribute_tensor(Tensor::rand({1, 1, 1}, DType::F64, 2), mesh, {Shard(2)});
    REQUIRE_THROWS_AS(dispatch("example::laplacian", {one, std::string("reflect")}),
                      InvalidArgument);
    REQUIRE_THROWS_AS(
        dispatch("example::laplacian",
                 {distribute_tensor(Tensor::rand({2, 3}, DType::F64, 3), mesh, {Replicate()})}),
        InvalidArgument);
  });
#endif
}

TEST_CASE("laplacian plugin on 2 ranks sharding H", "[plugin][laplacian][mp]") {
#ifndef DTENSOR_LAPLACIAN_PLUGIN
  WARN("skipped: the examples (and so the plugin) are not built");
  return;
#else
  run_ranks(2, [](RankContext&) { one_d_cases(2, 22, 32); });
#endif
}

TEST_CASE("laplacian plugin on 3 ranks sharding H (uneven and empty shards)",
          "[plugin][laplacian][mp]") {
#ifndef DTENSOR_LAPLACIAN_PLUGIN
  WARN("skipped: the examples (and so the plugin) are not built");
  return;
#else
  run_ranks(3, [](RankContext&) { one_d_cases(3, 33, 32); });
#endif
}

TEST_CASE("laplacian plugin on 4 ranks: a 1-D mesh sharding H, a 2x2 mesh sharding H and W",
          "[plugin][laplacian][mp]") {
#ifndef DTENSOR_LAPLACIAN_PLUGIN
  WARN("skipped: the examples (and so the plugin) are not built");
  return;
#else
  run_ranks(4, [](RankContext& ctx) {
    one_d_cases(4, 44, 24);
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    Rng rng(45);
    for (int i = 0; i < 32; ++i) {
      const std::string& mode = kModes[static_cast<std::size_t>(i) % kModes.size()];
      const Shape shape = random_shape(rng, 2, mode, 2);
      const std::int64_t pick = uni(rng, 0, 5);
      Placements pl = pick < 4 ? Placements{Shard(2), Shard(3)}
                      : pick == 4 ? Placements{Shard(3), Shard(2)}
                                  : Placements{Shard(0), Shard(2)};
      check_case(mesh, shape, pl, mode, rng());
    }
    // The halo travels: H and W sharded, interior corners included.
    const Shape shape{1, 2, 5, 6};
    const auto sent = ctx.pg->counters().bytes_sent.load();
    check_case(mesh, shape, {Shard(2), Shard(3)}, "circular", 7);
    REQUIRE(ctx.pg->counters().bytes_sent.load() > sent);
    // f32 runs too (the stencil accumulates in f64, rounds once).
    const Tensor X = Tensor::rand(shape, DType::F64, 8);
    const DTensor x32 = distribute_tensor(X.to(DType::F32), mesh, {Shard(2), Shard(3)});
    const DTensor y32 = dispatch("example::laplacian", {x32, std::string("reflect")}).at(0);
    REQUIRE(y32.dtype() == DType::F32);
    REQUIRE(max_abs_diff(y32.full_tensor().to(DType::F64),
                         oracle_forward(X.to(DType::F32).to(DType::F64), "reflect")) < 1e-5);
  });
#endif
}
