// WindowExchange as a user's handler sees it, on real ranks: the window
// post() lays out as tiles (and gather() assembles) equals the global input
// read naively at the window's global positions, boundary mode applied by
// hand; gradient() (the kernel writing tiles in place) and scatter_add() are
// its adjoint: summed over ranks, <window, G> = <shard, gradient of G>. Random
// sliding windows over every boundary mode, on 1-D meshes of 2 and 3 ranks
// (uneven and empty shards, halos several hops wide) and a 2x2 mesh with
// both spatial dims sharded (corners).
#include <fmt/format.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/window.h"
#include "dtensor/placement/dtensor.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

constexpr const char* kProbe = "test::window_probe";

// What the probe's handler checks and measures, per call.
struct Probe {
  std::vector<WindowDim> dims;
  Tensor global;                      // the whole input (f64), for the oracle
  std::uint64_t seed = 0;             // of the window gradient G
  double max_error = 0;               // window (post, and gather) against the oracle
  std::vector<double> sums;           // <window, G>, <shard, gradient()>, <shard, scatter_add()>
  std::size_t tiles_before_wait = 0;  // the window's tiles exist at once
  std::int64_t window_numel = 0;
};
Probe* current = nullptr;

// The global position a window element reads along a dim of length L.
std::int64_t source(std::int64_t p, std::int64_t L, Boundary b) {
  switch (b) {
    case Boundary::Zeros:
      return p;
    case Boundary::Reflect:
      return p < 0 ? -p : p >= L ? 2 * (L - 1) - p : p;
    case Boundary::Replicate:
      return std::clamp<std::int64_t>(p, 0, L - 1);
    case Boundary::Circular:
      return ((p % L) + L) % L;
  }
  return p;
}

// Every element of `t` (any strides) by row-major index.
template <typename F>
void for_each_index(const Shape& shape, F&& f) {
  const std::int64_t n = shape_numel(shape);
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t k = 0; k < n; ++k) {
    f(idx);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

double at(const Tensor& t, const std::vector<std::int64_t>& idx) {
  switch (idx.size()) {
    case 3:
      return t.item({idx[0], idx[1], idx[2]});
    case 4:
      return t.item({idx[0], idx[1], idx[2], idx[3]});
    default:
      throw std::logic_error("probe: 1 or 2 spatial dims");
  }
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for_each_index(a.shape(), [&](const auto& idx) { s += at(a, idx) * at(b, idx); });
  return s;
}

std::vector<DTensor> probe_handler(OpCall& call) {
  Probe& p = *current;
  const auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  const Tensor& local = x.to_local();
  WindowExchange engine(call, x.spec(), p.dims);
  WindowExchange::Pending pending = engine.post(local);
  p.tiles_before_wait = pending.window().tiles().size();
  const Tensor window = pending.wait().assemble();
  p.window_numel = window.numel();
  REQUIRE(window.shape() == engine.local_window_shape());
  for_each_index(window.shape(), [&](const std::vector<std::int64_t>& idx) {
    std::vector<std::int64_t> g = idx;
    for (std::size_t d = 0; d < p.dims.size(); ++d) {
      const WindowSpan& s = engine.spans()[d];
      g[d + 2] = source(s.origin + idx[d + 2], p.global.size(static_cast<std::int64_t>(d) + 2),
                        p.dims[d].boundary);
    }
    p.max_error = std::max(p.max_error, std::abs(at(window, idx) - at(p.global, g)));
  });
  const Tensor gathered = engine.gather(local);
  p.max_error =
      std::max(p.max_error, std::sqrt(std::abs(dot(gathered, gathered) - dot(window, window))));

  const Tensor G = Tensor::rand(window.shape(), DType::F64, p.seed);
  WindowExchange::Gradient gradient = engine.gradient();
  gradient.window().scatter(G);
  gradient.post();
  const Tensor via_tiles = gradient.finish();
  const Tensor via_scatter = engine.scatter_add(G);
  REQUIRE(via_tiles.shape() == local.shape());
  REQUIRE(via_scatter.shape() == local.shape());
  p.sums = {dot(window, G), dot(local, via_tiles), dot(local, via_scatter)};
  return {x};
}

void register_probe() {
  OpDef def;
  def.name = kProbe;
  def.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  def.strategies = [](const OpSchema& s) {
    const Placements& pl = s.dtensor(0).placements();
    return std::vector<ShardingStrategy>{{{pl}, {pl}}};
  };
  register_op(def, true);
  register_op_handler(kProbe, probe_handler, true, {.defers_agreement = true});
}

std::int64_t uni(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// A random sliding window over length L with boundary `b` that has output.
WindowDim random_dim(std::mt19937_64& rng, std::int64_t L, Boundary b) {
  for (;;) {
    const std::int64_t pad_cap = b == Boundary::Reflect ? L - 1 : b == Boundary::Circular ? L : 4;
    WindowDim d = WindowDim::sliding(uni(rng, 1, 5), uni(rng, 1, 3), uni(rng, 1, 2),
                                     uni(rng, 0, std::min<std::int64_t>(pad_cap, 4)),
                                     uni(rng, 0, std::min<std::int64_t>(pad_cap, 4)), b);
    try {
      d.output_length_for(L);
      return d;
    } catch (const InvalidArgument&) {
    }
  }
}

// `cases` random probes on `mesh` (each rank draws the same sequence).
void run_cases(const RankContext& ctx, const DeviceMesh& mesh, int cases, std::uint64_t seed) {
  register_probe();
  std::mt19937_64 rng(seed);
  constexpr Boundary kModes[] = {Boundary::Zeros, Boundary::Reflect, Boundary::Replicate,
                                 Boundary::Circular};
  for (int k = 0; k < cases; ++k) {
    const std::int64_t spatial = mesh.ndim() == 2 ? 2 : uni(rng, 1, 2);
    Shape shape{uni(rng, 1, 2), uni(rng, 1, 3)};
    for (std::int64_t d = 0; d < spatial; ++d)
      shape.push_back(uni(rng, 1, 11));
    Placements placements;
    if (mesh.ndim() == 2)
      placements = uni(rng, 0, 1) ? Placements{Shard(2), Shard(3)} : Placements{Shard(3), Shard(2)};
    else
      placements = {Shard(2 + uni(rng, 0, spatial - 1))};
    Probe p;
    for (std::int64_t d = 0; d < spatial; ++d)
      p.dims.push_back(
          random_dim(rng, shape[static_cast<std::size_t>(d) + 2], kModes[uni(rng, 0, 3)]));
    p.global = Tensor::rand(shape, DType::F64, seed + static_cast<std::uint64_t>(k));
    p.seed = 1000 * seed + static_cast<std::uint64_t>(k * ctx.world_size + ctx.rank);
    std::string what = fmt::format("case {}: input {} placements", k, shape_str(shape));
    for (const auto& pl : placements)
      what += " " + pl.str();
    for (const auto& d : p.dims)
      what += " | " + d.str();
    INFO(what);
    current = &p;
    const DTensor x = distribute_tensor(p.global, mesh, placements);
    dispatch(kProbe, {x});
    current = nullptr;
    CHECK(p.max_error == 0.0);
    // The adjoint, over all ranks.
    Tensor sums = Tensor::zeros({3}, DType::F64);
    for (std::int64_t i = 0; i < 3; ++i)
      sums.data<double>()[i] = p.sums[static_cast<std::size_t>(i)];
    ctx.pg->allreduce(sums);
    CHECK((p.tiles_before_wait > 0 || p.window_numel == 0));
    const double scale = 1.0 + std::abs(sums.item({0}));
    CHECK(std::abs(sums.item({1}) - sums.item({0})) <= 1e-12 * scale);
    CHECK(std::abs(sums.item({2}) - sums.item({0})) <= 1e-12 * scale);
  }
}

}  // namespace

TEST_CASE(
    "WindowExchange post and gradient: the window against a naive oracle, the gradient "
    "its adjoint, every boundary, 1-D meshes of 2 and 3 ranks",
    "[window][exchange][mp]") {
  for (int P : {2, 3})
    run_ranks(P, [P](RankContext& ctx) {
      run_cases(ctx, init_device_mesh(DeviceType::CPU, {P}), 60, 7 + static_cast<std::uint64_t>(P));
    });
}

TEST_CASE("WindowExchange post and gradient on a 2x2 mesh: corners, every boundary",
          "[window][exchange][mp]") {
  run_ranks(4, [](RankContext& ctx) {
    run_cases(ctx, init_device_mesh(DeviceType::CPU, {2, 2}), 40, 29);
  });
}
