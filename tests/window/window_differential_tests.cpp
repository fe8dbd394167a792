// The window operators against the naive f64 oracles of tools/reference
// (which share no code with the library): max/avg pools, adaptive pools, pad
// in every mode, and convolution with a padding mode, over seeded random
// configurations on 1-D and 2-D meshes (uneven, empty and narrower-than-halo
// shards, batch and channel sharding mixed in), forward and backward; and the
// named edge cases (ceil_mode's dropped windows, max ties and NaN, reflect
// padding wider than a shard, circular on one rank).
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/window_ops.h"
#include "tests/conv/conv_case.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"
#include "tools/reference/reference_window_ops.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::reference;

namespace {

using Rng = std::mt19937_64;
std::int64_t uni(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

enum class Op { MaxPool, AvgPool, AdaptiveAvg, AdaptiveMax, Pad };
const char* op_name(Op op) {
  switch (op) {
    case Op::MaxPool:
      return "max_pool";
    case Op::AvgPool:
      return "avg_pool";
    case Op::AdaptiveAvg:
      return "adaptive_avg_pool";
    case Op::AdaptiveMax:
      return "adaptive_max_pool";
    case Op::Pad:
      return "pad";
  }
  return "?";
}

struct Case {
  Op op;
  Shape input;
  PoolParams pool{};  // {} initialisers: cases name only the fields they use
  std::vector<std::int64_t> output_size{};
  ConvParams::Padding padding{};
  PadMode mode = PadMode::Constant;
  double value = 0;
  Placements placements{};
  std::uint64_t seed = 0;
  bool ties = false;  // values on a coarse grid, with NaN and -inf sprinkled in
  std::string str() const {
    return fmt::format(
        "{} input {} pool [{}] output_size [{}] pad mode {} value {} placements {} "
        "seed {} ties {}",
        op_name(op), shape_str(input), pool.str(), fmt::join(output_size, ","), pad_mode_name(mode),
        value, placements_str(placements), seed, ties);
  }
};

Placements random_placements(Rng& rng, const Shape& mesh, std::int64_t ndim) {
  Placements out;
  std::vector<std::int64_t> used;
  for (std::size_t m = 0; m < mesh.size(); ++m) {
    const std::int64_t pick = uni(rng, 0, 9);
    std::int64_t d = pick <= 6 ? uni(rng, 2, ndim - 1) : pick == 7 ? 0 : pick == 8 ? 1 : -1;
    if (d >= 0 && std::find(used.begin(), used.end(), d) == used.end()) {
      used.push_back(d);
      out.push_back(Shard(d));
    } else {
      out.push_back(Replicate());
    }
  }
  return out;
}

Case random_case(Rng& rng, Op op, const Shape& mesh) {
  Case c;
  c.op = op;
  c.seed = rng();
  const std::int64_t nsp = uni(rng, 1, 3);
  const std::int64_t max_len = nsp == 1 ? 20 : nsp == 2 ? 10 : 6;
  c.input = {uni(rng, 1, 3), uni(rng, 1, 3)};
  c.pool.kernel.clear();
  c.pool.stride.clear();
  c.pool.padding.clear();
  c.pool.dilation.clear();
  c.pool.ceil_mode = uni(rng, 0, 1) == 1;
  c.pool.count_include_pad = uni(rng, 0, 1) == 1;
  if (op == Op::AvgPool && uni(rng, 0, 4) == 0) c.pool.divisor_override = uni(rng, 1, 5);
  for (std::int64_t d = 0; d < nsp; ++d) {
    while (true) {
      const std::int64_t L = uni(rng, 1, max_len);
      if (op == Op::MaxPool || op == Op::AvgPool) {
        const std::int64_t k = uni(rng, 1, 4), s = uni(rng, 1, 3);
        const std::int64_t dil = op == Op::MaxPool ? uni(rng, 1, 2) : 1;
        const std::int64_t half = k / 2;  // PyTorch: at most half the kernel size
        const std::int64_t pl = uni(rng, 0, half), pr = uni(rng, 0, half);
        if (pool_output_length(L, k, s, dil, pl, pr, c.pool.ceil_mode) < 1) continue;
        c.pool.kernel.push_back(k);
        c.pool.stride.push_back(s);
        c.pool.dilation.push_back(dil);
        c.pool.padding.emplace_back(pl, pr);
      } else if (op == Op::Pad) {
        if (d == 0) c.mode = static_cast<PadMode>(uni(rng, 0, 3));
        std::int64_t pl = 0, pr = 0;
        switch (c.mode) {
          case PadMode::Constant:
            pl = uni(rng, -2, 4);
            pr = uni(rng, -2, 4);
            if (L + pl + pr < 0) continue;
            break;
          case PadMode::Reflect:
            pl = uni(rng, 0, L - 1);
            pr = uni(rng, 0, L - 1);
            break;
          case PadMode::Replicate:
            pl = uni(rng, 0, 5);
            pr = uni(rng, 0, 5);
            break;
          case PadMode::Circular:
            pl = uni(rng, 0, L);
            pr = uni(rng, 0, L);
            break;
        }
        c.padding.emplace_back(pl, pr);
      } else {
        c.output_size.push_back(uni(rng, 1, L + 2));
      }
      c.input.push_back(L);
      break;
    }
  }
  c.value = c.mode == PadMode::Constant && uni(rng, 0, 1) ? 0.5 : 0.0;
  c.placements = random_placements(rng, mesh, static_cast<std::int64_t>(c.input.size()));
  c.ties = (op == Op::MaxPool || op == Op::AdaptiveMax) && uni(rng, 0, 2) == 0;
  return c;
}

// Elementwise comparison in which NaN equals NaN (max pools propagate it).
void require_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  REQUIRE(got.shape() == want.shape());
  const Tensor g = got.to(DType::F64).contiguous(), w = want.to(DType::F64).contiguous();
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    const double a = g.item_flat(i), b = w.item_flat(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b) continue;  // equal infinities
    INFO(what << " element " << i << ": " << a << " vs " << b);
    REQUIRE(std::abs(a - b) <= tol * std::max(1.0, std::abs(b)));
  }
}

Tensor make_input(const Case& c, DType dtype) {
  Tensor x = Tensor::rand(c.input, DType::F64, c.seed);
  if (c.ties) {
    double* p = x.data<double>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      p[i] = std::floor(p[i] * 2) / 2;  // few distinct values: ties everywhere
      if (i % 11 == 3) p[i] = std::nan("");
      if (i % 13 == 5) p[i] = -INFINITY;
    }
  }
  return x.to(dtype);
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Tensor X = make_input(c, dtype);
  const double tol = dtype == DType::F64 ? 1e-12 : 1e-5;
  const DTensor x = distribute_tensor(X, mesh, c.placements);
  std::optional<DTensor> y_;
  Tensor Yref;
  switch (c.op) {
    case Op::MaxPool:
      y_.emplace(max_pool(x, c.pool));
      Yref = ref_max_pool_forward(X, c.pool);
      break;
    case Op::AvgPool:
      y_.emplace(avg_pool(x, c.pool));
      Yref = ref_avg_pool_forward(X, c.pool);
      break;
    case Op::AdaptiveAvg:
      y_.emplace(adaptive_avg_pool(x, c.output_size));
      Yref = ref_adaptive_avg_pool_forward(X, c.output_size);
      break;
    case Op::AdaptiveMax:
      y_.emplace(adaptive_max_pool(x, c.output_size));
      Yref = ref_adaptive_max_pool_forward(X, c.output_size);
      break;
    case Op::Pad:
      y_.emplace(pad(x, c.padding, c.mode, c.value));
      Yref = ref_pad_forward(X, c.padding, c.mode, c.value);
      break;
  }
  const DTensor& y = *y_;
  require_close(y.full_tensor(), Yref, tol, "output");

  const Tensor GY = Tensor::rand(Yref.shape(), dtype, c.seed + 1);
  const DTensor gy = distribute_tensor(GY, mesh, y.placements());
  std::optional<DTensor> gx_;
  Tensor GXref;
  switch (c.op) {
    case Op::MaxPool:
      gx_.emplace(max_pool_backward(gy, x, c.pool));
      GXref = ref_max_pool_grad_input(GY, X, c.pool);
      break;
    case Op::AvgPool:
      gx_.emplace(avg_pool_backward(gy, x, c.pool));
      GXref = ref_avg_pool_grad_input(GY, X.shape(), c.pool);
      break;
    case Op::AdaptiveAvg:
      gx_.emplace(adaptive_avg_pool_backward(gy, x, c.output_size));
      GXref = ref_adaptive_avg_pool_grad_input(GY, X.shape(), c.output_size);
      break;
    case Op::AdaptiveMax:
      gx_.emplace(adaptive_max_pool_backward(gy, x, c.output_size));
      GXref = ref_adaptive_max_pool_grad_input(GY, X, c.output_size);
      break;
    case Op::Pad:
      gx_.emplace(pad_backward(gy, x, c.padding, c.mode));
      GXref = ref_pad_grad_input(GY, X.shape(), c.padding, c.mode);
      break;
  }
  const DTensor& gx = *gx_;
  CHECK(gx.placements() == x.placements());
  require_close(gx.full_tensor(), GXref, tol * 4, "grad_input");
}

struct Batch {
  Op op;
  Shape mesh;
  DType dtype;
  int configs;
};

std::string mesh_str(const Shape& mesh) {
  std::string s;
  for (std::size_t k = 0; k < mesh.size(); ++k)
    s += (k ? "x" : "") + std::to_string(mesh[k]);
  return s;
}

DTENSOR_TEST_REGISTRAR {
  // >= 100 configurations per operator in the default run.
  std::vector<Batch> batches;
  for (Op op : {Op::MaxPool, Op::AvgPool, Op::AdaptiveAvg, Op::AdaptiveMax, Op::Pad}) {
    batches.push_back({op, {2}, DType::F64, 30});
    batches.push_back({op, {3}, DType::F64, 30});
    batches.push_back({op, {4}, DType::F64, 20});
    batches.push_back({op, {2, 2}, DType::F64, 20});
    batches.push_back({op, {2}, DType::F32, 10});
  }
  for (const auto& b : batches) {
    const std::string name =
        fmt::format("window differential {} {} mesh {} ({} configs)", op_name(b.op),
                    dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[window][differential][mp]", [=] {
      RunOptions o;
      o.deadline = std::chrono::seconds(240);
      run_ranks(
          static_cast<int>(shape_numel(b.mesh)),
          [=](RankContext&) {
            Rng rng(std::hash<std::string>()(name));
            for (int k = 0; k < b.configs; ++k)
              check_case(random_case(rng, b.op, b.mesh), b.mesh, b.dtype);
          },
          o);
    });
  }

  // Convolution with reflect, replicate and circular padding.
  for (const Shape& mesh : {Shape{2}, Shape{3}, Shape{2, 2}, Shape{4}}) {
    const std::string name =
        fmt::format("window differential conv padding_mode f64 mesh {}", mesh_str(mesh));
    register_test(name, "[window][differential][conv][mp]", [=] {
      RunOptions o;
      o.deadline = std::chrono::seconds(240);
      run_ranks(
          static_cast<int>(shape_numel(mesh)),
          [=](RankContext&) {
            Rng rng(std::hash<std::string>()(name));
            for (int k = 0; k < 30; ++k)
              check_conv_case(random_padding_mode_case(rng, mesh, DType::F64));
          },
          o);
    });
  }

  // Named edge cases.
  register_test(
      "window edge cases: ceil_mode dropped window - max ties and NaN - reflect wider than a "
      "shard - circular on one rank",
      "[window][edge][mp]", [] {
        run_ranks(4, [](RankContext&) {
          // L=5, k=2, s=2, pad (1,1), ceil: ceil((5+2-2)/2)+1 = 4, but
          // window 3 would start at 6 - 1 = 5 >= L + pl? (3*2 = 6 >= 5+1): dropped -> 3.
          Case ceil{Op::MaxPool, {1, 2, 5}};
          ceil.pool = {{2}, {2}, {{1, 1}}, {1}, true, true, std::nullopt};
          ceil.placements = {Shard(2)};
          ceil.seed = 7;
          REQUIRE(pool_output_length(5, 2, 2, 1, 1, 1, true) == 3);
          check_case(ceil, {4}, DType::F64);
          Case avg = ceil;
          avg.op = Op::AvgPool;
          check_case(avg, {4}, DType::F64);
          avg.pool.count_include_pad = false;
          check_case(avg, {4}, DType::F64);

          Case ties{Op::MaxPool, {2, 3, 9, 7}};
          ties.pool = {{3, 2}, {2, 1}, {{1, 1}, {0, 1}}, {1, 2}, false, true, std::nullopt};
          ties.placements = {Shard(2)};
          ties.ties = true;
          ties.seed = 11;
          check_case(ties, {4}, DType::F64);
          ties.op = Op::AdaptiveMax;
          ties.output_size = {4, 5};
          check_case(ties, {4}, DType::F64);

          // Every output's window clipped by the padding to the same
          // positions (a dim of 2 under a 3-wide window padded by 1; an
          // adaptive pool with more outputs than inputs): the kernels' run
          // of regular outputs is not one of stride 0, whose gradients
          // would go into one place from several vector lanes at once.
          Case clipped{Op::AvgPool, {2, 3, 2, 5}};
          clipped.pool = {{3, 3}, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, false, true, std::nullopt};
          clipped.placements = {Replicate()};
          clipped.seed = 5;
          check_case(clipped, {4}, DType::F64);
          clipped.input = {2, 3, 5, 2};
          check_case(clipped, {4}, DType::F64);
          clipped.pool.count_include_pad = false;
          check_case(clipped, {4}, DType::F64);
          clipped.op = Op::AdaptiveAvg;
          clipped.input = {2, 3, 2, 1};
          clipped.output_size = {3, 4};
          check_case(clipped, {4}, DType::F64);
          clipped.op = Op::MaxPool;
          clipped.input = {2, 3, 5, 2};
          check_case(clipped, {4}, DType::F64);

          // Reflect and circular padding of 5 on a dim of 6 over 4 ranks
          // (shards of 2, 2, 2, 0): the padding comes from ranks 2 hops away.
          Case wide{Op::Pad, {1, 2, 6}};
          wide.padding = {{5, 4}};
          wide.mode = PadMode::Reflect;
          wide.placements = {Shard(2)};
          wide.seed = 3;
          check_case(wide, {4}, DType::F64);
          wide.mode = PadMode::Circular;
          wide.padding = {{6, 5}};
          check_case(wide, {4}, DType::F64);
          wide.mode = PadMode::Replicate;
          check_case(wide, {4}, DType::F64);
        });
        // Where the window is the shard itself (no padding to fetch), the engine
        // hands out a view: outputs must still be tensors of their own.
        run_ranks(2, [](RankContext&) {
          DeviceMesh mesh(DeviceType::CPU, {2});
          const DTensor x =
              distribute_tensor(Tensor::rand({1, 2, 8}, DType::F64, 1), mesh, {Shard(2)});
          for (PadMode m : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
            const DTensor y = pad(x, {{0, 0}}, m);
            CHECK_FALSE(y.to_local().shares_storage_with(x.to_local()));
          }
          PoolParams p;
          p.kernel = {2};
          CHECK_FALSE(max_pool(x, p).to_local().shares_storage_with(x.to_local()));
          CHECK_FALSE(avg_pool(x, p).to_local().shares_storage_with(x.to_local()));
        });
        // Circular on one rank: the ring is the whole dim, as in PyTorch.
        run_ranks(1, [](RankContext&) {
          Case one{Op::Pad, {1, 1, 4, 3}};
          one.padding = {{2, 4}, {3, 1}};
          one.mode = PadMode::Circular;
          one.placements = {Replicate()};
          one.seed = 5;
          check_case(one, {1}, DType::F64);
        });
      });
}

}  // namespace
