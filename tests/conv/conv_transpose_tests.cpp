// The distributed transposed convolution (ops/window/conv_transpose.cpp)
// against a naive f64 oracle written here, sharing no code with the library:
// out[n, g*Cog + co, i*s - p + j*d] += x[n, g*Cig + ci, i] * w[g*Cig + ci, co, j]
// over every spatial dim. Randomised configurations (1-3 spatial dims,
// uneven and empty shards, strides, dilations, output_padding, groups, bias,
// batch / spatial / replicated / Partial inputs) on 2, 3 and 4 ranks, 1-D and
// 2x2 meshes, f64 and f32 (and a few bf16 and f16); forward and backward.
// DTENSOR_CONV_SWEEP=K runs K times as many configurations.
#include <fmt/format.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "dtensor/ops/window_ops.h"
#include "dtensor/placement/dtensor.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

using Int = std::int64_t;

// ---- the oracle ---------------------------------------------------------------

struct Dense {
  Shape shape;
  std::vector<double> v;
};

Dense dense(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).to(DType::F64).contiguous();
  Dense d{t.shape(), std::vector<double>(static_cast<std::size_t>(t.numel()))};
  if (t.numel() > 0) std::copy_n(h.data<double>(), t.numel(), d.v.begin());
  return d;
}

Int numel(const Shape& s) {
  Int n = 1;
  for (Int e : s)
    n *= e;
  return n;
}

// Every multi-index of `extents`, row-major.
std::vector<std::vector<Int>> indices(const std::vector<Int>& extents) {
  std::vector<std::vector<Int>> out;
  const Int n = numel(extents);
  for (Int f = 0; f < n; ++f) {
    std::vector<Int> idx(extents.size());
    Int r = f;
    for (std::size_t k = extents.size(); k-- > 0;) {
      idx[k] = r % extents[k];
      r /= extents[k];
    }
    out.push_back(idx);
  }
  return out;
}

struct Geometry {
  std::vector<Int> stride, padding, output_padding, dilation;
  Int groups = 1;
};

Int out_len(Int L, Int k, Int s, Int d, Int p, Int op) {
  return (L - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

// Calls f(n, ci, co_global, co_in_group, flat x index, flat w index, flat y index)
// for every product x * w that lands inside the output.
template <typename F>
void for_each_term(const Shape& xs, const Shape& ws, const Shape& ys, const Geometry& g, F f) {
  const std::size_t nsp = xs.size() - 2;
  const Int N = xs[0], Cin = xs[1], Cog = ws[1], Cig = Cin / g.groups;
  const std::vector<Int> L(xs.begin() + 2, xs.end()), K(ws.begin() + 2, ws.end()),
      O(ys.begin() + 2, ys.end());
  const auto in_idx = indices(L);
  const auto k_idx = indices(K);
  const Int Ls = numel(L), Ks = numel(K), Os = numel(O);
  for (Int n = 0; n < N; ++n)
    for (Int ci = 0; ci < Cin; ++ci) {
      const Int grp = ci / Cig;
      for (Int co = 0; co < Cog; ++co) {
        const Int cy = grp * Cog + co;
        for (Int a = 0; a < Ls; ++a)
          for (Int b = 0; b < Ks; ++b) {
            Int flat = 0;
            bool inside = true;
            for (std::size_t k = 0; k < nsp && inside; ++k) {
              const Int o = in_idx[static_cast<std::size_t>(a)][k] * g.stride[k] - g.padding[k] +
                            k_idx[static_cast<std::size_t>(b)][k] * g.dilation[k];
              inside = o >= 0 && o < O[k];
              flat = flat * O[k] + o;
            }
            if (!inside) continue;
            f((n * Cin + ci) * Ls + a, (ci * Cog + co) * Ks + b, (n * ys[1] + cy) * Os + flat);
          }
      }
    }
}

Shape oracle_output_shape(const Shape& xs, const Shape& ws, const Geometry& g) {
  Shape ys{xs[0], ws[1] * g.groups};
  for (std::size_t k = 0; k + 2 < xs.size(); ++k)
    ys.push_back(out_len(xs[k + 2], ws[k + 2], g.stride[k], g.dilation[k], g.padding[k],
                         g.output_padding[k]));
  return ys;
}

Dense oracle_forward(const Dense& x, const Dense& w, const Dense* b, const Geometry& g) {
  Dense y{oracle_output_shape(x.shape, w.shape, g), {}};
  y.v.assign(static_cast<std::size_t>(numel(y.shape)), 0.0);
  for_each_term(x.shape, w.shape, y.shape, g, [&](Int xi, Int wi, Int yi) {
    y.v[static_cast<std::size_t>(yi)] +=
        x.v[static_cast<std::size_t>(xi)] * w.v[static_cast<std::size_t>(wi)];
  });
  if (b) {
    const Int C = y.shape[1], inner = numel(y.shape) / std::max<Int>(1, y.shape[0] * C);
    for (Int n = 0; n < y.shape[0]; ++n)
      for (Int c = 0; c < C; ++c)
        for (Int i = 0; i < inner; ++i)
          y.v[static_cast<std::size_t>((n * C + c) * inner + i)] +=
              b->v[static_cast<std::size_t>(c)];
  }
  return y;
}

struct OracleGrads {
  Dense gx, gw, gb;
};

OracleGrads oracle_backward(const Dense& gy, const Dense& x, const Dense& w, const Geometry& g) {
  OracleGrads r{{x.shape, std::vector<double>(x.v.size(), 0.0)},
                {w.shape, std::vector<double>(w.v.size(), 0.0)},
                {{gy.shape[1]}, std::vector<double>(static_cast<std::size_t>(gy.shape[1]), 0.0)}};
  for_each_term(x.shape, w.shape, gy.shape, g, [&](Int xi, Int wi, Int yi) {
    const double gyv = gy.v[static_cast<std::size_t>(yi)];
    r.gx.v[static_cast<std::size_t>(xi)] += gyv * w.v[static_cast<std::size_t>(wi)];
    r.gw.v[static_cast<std::size_t>(wi)] += gyv * x.v[static_cast<std::size_t>(xi)];
  });
  const Int C = gy.shape[1], inner = numel(gy.shape) / std::max<Int>(1, gy.shape[0] * C);
  for (Int n = 0; n < gy.shape[0]; ++n)
    for (Int c = 0; c < C; ++c)
      for (Int i = 0; i < inner; ++i)
        r.gb.v[static_cast<std::size_t>(c)] +=
            gy.v[static_cast<std::size_t>((n * C + c) * inner + i)];
  return r;
}

double max_diff(const Dense& a, const Dense& b) {
  REQUIRE(a.shape == b.shape);
  double m = 0;
  for (std::size_t i = 0; i < a.v.size(); ++i)
    m = std::max(m, std::abs(a.v[i] - b.v[i]));
  return m;
}

double magnitude(const Dense& a) {
  double m = 0;
  for (double v : a.v)
    m = std::max(m, std::abs(v));
  return m;
}

double tolerance(DType dtype, Int reduction, double mag) {
  const double scale = std::max(1.0, mag);
  switch (dtype) {
    case DType::F64:
      return 1e-10 * scale;
    case DType::F32:
      return (1e-6 + 1e-7 * static_cast<double>(reduction)) * scale;
    case DType::BF16:  // storage and Partial-sum roundings (unit roundoff 2^-8)
      return 2e-2 * scale * std::sqrt(static_cast<double>(reduction));
    case DType::F16:  // likewise, 2^-11
      return 2.5e-3 * scale * std::sqrt(static_cast<double>(reduction));
    case DType::I64:  // no convolution of integers
      break;
  }
  return 0;
}

// ---- one case -------------------------------------------------------------------

struct Case {
  Shape input;  // [N, C_in, L...]
  Int out_channels = 1;
  Shape kernel;
  Geometry geo;
  bool bias = true;
  Shape mesh;
  Placements input_placements;
  bool weight_sharded = false;  // weight S(0) on mesh dim 0: the propagator must move it
  ConvOutputMask mask;
  DType dtype = DType::F64;
  std::uint64_t seed = 0;

  ConvTransposeParams params() const {
    ConvTransposeParams p;
    p.stride = geo.stride;
    p.padding = geo.padding;
    p.output_padding = geo.output_padding;
    p.dilation = geo.dilation;
    p.groups = geo.groups;
    return p;
  }
  std::string str() const {
    std::string pl;
    for (const auto& p : input_placements)
      pl += (pl.empty() ? "" : ", ") + p.str();
    return fmt::format(
        "input {} C_out {} kernel {} {} bias {} mesh {} input [{}] weight {} mask {}{}{} {} "
        "seed {}",
        shape_str(input), out_channels, shape_str(kernel), params().str(), bias, shape_str(mesh),
        pl, weight_sharded ? "S(0)" : "R", mask.input, mask.weight, mask.bias, dtype_name(dtype),
        seed);
  }
};

void check_case(const Case& c) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, c.mesh);
  const Int g = c.geo.groups;
  Shape wshape{c.input[1], c.out_channels / g};
  for (Int k : c.kernel)
    wshape.push_back(k);
  const Tensor X = Tensor::rand(c.input, c.dtype, c.seed * 4 + 1);
  const Tensor W = Tensor::rand(wshape, c.dtype, c.seed * 4 + 2);
  const Tensor B = c.bias ? Tensor::rand({c.out_channels}, c.dtype, c.seed * 4 + 3) : Tensor();
  const Dense Xd = dense(X), Wd = dense(W), Bd = c.bias ? dense(B) : Dense{};
  const Dense Yref = oracle_forward(Xd, Wd, c.bias ? &Bd : nullptr, c.geo);
  REQUIRE(conv_transpose_output_shape(c.input, wshape, c.params()) == Yref.shape);

  Placements wp(mesh.ndim(), Replicate());
  if (c.weight_sharded) wp[0] = Shard(0);
  auto x = distribute_tensor(X, mesh, c.input_placements);
  auto w = distribute_tensor(W, mesh, wp);
  std::optional<DTensor> b;
  if (c.bias) b = distribute_tensor(B, mesh, Placements(mesh.ndim(), Replicate()));
  auto y = conv_transpose(x, w, b, c.params());
  REQUIRE(y.shape() == Yref.shape);
  Int red = wshape[1] * g;  // generous: every product of a group may meet
  for (Int k : c.kernel)
    red *= k;
  CHECK(max_diff(dense(y.full_tensor()), Yref) <= tolerance(c.dtype, red, magnitude(Yref)));

  // grad_output placed like the output, as autograd would hand it over; a
  // Partial output's gradient comes replicated or (odd seeds) as a pending sum.
  const Tensor GY = Tensor::rand(Yref.shape, c.dtype, c.seed * 4 + 4);
  const bool partial_out = std::any_of(y.placements().begin(), y.placements().end(),
                                       [](const Placement& p) { return p.is_partial(); });
  auto gy = distribute_tensor(
      GY, mesh,
      partial_out && c.seed % 2 == 0 ? Placements(mesh.ndim(), Replicate()) : y.placements());
  const ConvGrads grads = conv_transpose_backward(gy, x, w, c.params(), c.mask);
  const OracleGrads ref = oracle_backward(dense(GY), Xd, Wd, c.geo);
  REQUIRE(grads.grad_input.has_value() == c.mask.input);
  REQUIRE(grads.grad_weight.has_value() == c.mask.weight);
  REQUIRE(grads.grad_bias.has_value() == c.mask.bias);
  if (c.mask.input) {
    const DTensor& gx = *grads.grad_input;
    REQUIRE(gx.shape() == c.input);
    for (std::size_t m = 0; m < x.placements().size(); ++m) {
      const Placement& gp = gx.placements()[m];
      const Placement& xp = x.placements()[m];
      REQUIRE((gp == xp || xp.is_partial() || (gp.is_partial() && xp.is_replicate())));
    }
    Int red_in = wshape[1];
    for (Int k : c.kernel)
      red_in *= k;
    CHECK(max_diff(dense(gx.full_tensor()), ref.gx) <=
          tolerance(c.dtype, red_in, magnitude(ref.gx)));
  }
  const Int red_w = numel(Yref.shape) / std::max<Int>(1, Yref.shape[1]);
  if (c.mask.weight)
    CHECK(max_diff(dense(grads.grad_weight->full_tensor()), ref.gw) <=
          tolerance(c.dtype, red_w, magnitude(ref.gw)));
  if (c.mask.bias)
    CHECK(max_diff(dense(grads.grad_bias->full_tensor()), ref.gb) <=
          tolerance(c.dtype, red_w, magnitude(ref.gb)));
}

Case random_case(std::mt19937_64& rng, const Shape& mesh, DType dtype) {
  auto uni = [&](Int lo, Int hi) { return std::uniform_int_distribution<Int>(lo, hi)(rng); };
  Case c;
  c.mesh = mesh;
  c.dtype = dtype;
  c.seed = rng();
  const Int nsp = uni(1, 3);
  const Int max_len = nsp == 1 ? 12 : nsp == 2 ? 6 : 4;
  Int groups = 1;
  switch (uni(0, 3)) {
    case 0:
      groups = 1;
      break;
    case 1:
      groups = 2;
      break;
    case 2:
      groups = 3;
      break;
    default:
      groups = 0;  // depthwise
  }
  const Int cin = groups == 0 ? uni(1, 3) : groups * uni(1, 2);
  if (groups == 0) groups = cin;
  c.geo.groups = groups;
  c.out_channels = groups * uni(1, 2);
  c.input = {uni(1, 3), cin};
  for (Int d = 0; d < nsp; ++d) {
    while (true) {  // until the output is non-empty
      const Int L = uni(1, max_len), K = uni(1, nsp == 3 ? 3 : 4), s = uni(1, 3), dil = uni(1, 2),
                p = uni(0, 3), op = uni(0, std::max(s, dil) - 1);
      if (out_len(L, K, s, dil, p, op) < 1) continue;
      c.input.push_back(L);
      c.kernel.push_back(K);
      c.geo.stride.push_back(s);
      c.geo.dilation.push_back(dil);
      c.geo.padding.push_back(p);
      c.geo.output_padding.push_back(op);
      break;
    }
  }
  c.bias = uni(0, 3) != 0;
  std::vector<Int> used;
  for (std::size_t m = 0; m < mesh.size(); ++m) {
    const Int pick = uni(0, 9);
    if (pick <= 5) {  // mostly spatial shards: the window engine's path
      const Int d = 2 + uni(0, nsp - 1);
      if (std::find(used.begin(), used.end(), d) == used.end()) {
        used.push_back(d);
        c.input_placements.push_back(Shard(d));
        continue;
      }
    }
    c.input_placements.push_back(pick <= 6   ? Placement(Shard(0))
                                 : pick == 7 ? Placement(Partial())
                                             : Placement(Replicate()));
  }
  c.weight_sharded = uni(0, 9) == 0;
  switch (uni(0, 7)) {
    case 0:
      c.mask = {true, false, false};
      break;
    case 1:
      c.mask = {false, true, c.bias};
      break;
    case 2:
      c.mask = {false, false, true};
      break;
    default:
      c.mask = {true, true, c.bias};
  }
  return c;
}

int sweep_factor() {
  const char* v = std::getenv("DTENSOR_CONV_SWEEP");
  return v ? std::max(1, std::atoi(v)) : 1;
}

struct Batch {
  Shape mesh;
  DType dtype;
  int configs;
};

DTENSOR_TEST_REGISTRAR {
  const Batch batches[] = {
      {{2}, DType::F64, 30},    {{3}, DType::F64, 30}, {{4}, DType::F64, 25},
      {{2, 2}, DType::F64, 25}, {{2}, DType::F32, 15}, {{2, 2}, DType::F32, 15},
      {{3}, DType::BF16, 8},    {{3}, DType::F16, 8},
  };
  for (const auto& b : batches) {
    std::string mesh;
    for (std::size_t k = 0; k < b.mesh.size(); ++k)
      mesh += (k ? "x" : "") + std::to_string(b.mesh[k]);
    const std::string name = fmt::format("conv_transpose differential {} mesh {} configs {}",
                                         dtype_name(b.dtype), mesh, b.configs);
    register_test(name, "[conv_transpose][differential][mp]", [=] {
      RunOptions o;
      o.deadline = std::chrono::seconds(240);
      run_ranks(
          static_cast<int>(shape_numel(b.mesh)),
          [=](RankContext&) {
            // Every rank draws the same configs from the same seed.
            std::mt19937_64 rng(std::hash<std::string>()(name));
            for (int k = 0; k < b.configs * sweep_factor(); ++k)
              check_case(random_case(rng, b.mesh, b.dtype));
          },
          o);
    });
  }
}

Case named_case(Shape input, Int out_channels, Shape kernel, Geometry geo, Shape mesh,
                Placements placements, std::uint64_t seed) {
  Case c;
  c.input = std::move(input);
  c.out_channels = out_channels;
  c.kernel = std::move(kernel);
  c.geo = std::move(geo);
  c.mesh = std::move(mesh);
  c.input_placements = std::move(placements);
  c.seed = seed;
  return c;
}

}  // namespace

TEST_CASE("conv_transpose oracle: hand-computed values", "[conv_transpose]") {
  // x = [1, 2], w = [1, 10, 100], stride 2: i=0 writes 1, 10, 100 at 0..2; i=1 writes 2, 20,
  // 200 at 2..4.
  const Dense x{{1, 1, 2}, {1, 2}}, w{{1, 1, 3}, {1, 10, 100}}, b{{1}, {0.5}};
  Geometry g{{2}, {0}, {0}, {1}, 1};
  CHECK(oracle_forward(x, w, nullptr, g).v == std::vector<double>{1, 10, 102, 20, 200});
  CHECK(oracle_forward(x, w, &b, g).v == std::vector<double>{1.5, 10.5, 102.5, 20.5, 200.5});
  Geometry padded{{2}, {1}, {0}, {1}, 1};  // crops one output from each side
  CHECK(oracle_forward(x, w, nullptr, padded).v == std::vector<double>{10, 102, 20});
  Geometry extra{{2}, {0}, {1}, {1}, 1};  // one more output that nothing reaches
  CHECK(oracle_forward(x, w, nullptr, extra).v == std::vector<double>{1, 10, 102, 20, 200, 0});
  Geometry dilated{{1}, {0}, {0}, {2}, 1};  // taps 0, 2, 4 from each input
  CHECK(oracle_forward(x, w, nullptr, dilated).v == std::vector<double>{1, 2, 10, 20, 100, 200});
  const OracleGrads gr = oracle_backward(Dense{{1, 1, 5}, {1, 2, 3, 4, 5}}, x, w, g);
  CHECK(gr.gx.v == std::vector<double>{321, 543});   // 1 + 20 + 300, 3 + 40 + 500
  CHECK(gr.gw.v == std::vector<double>{7, 10, 13});  // x0 * gy[k] + x1 * gy[2 + k]
  CHECK(gr.gb.v == std::vector<double>{15});
  // groups 2, 1x1 kernel, two output channels per group: x channels 1 and 5.
  Geometry grouped{{1}, {0}, {0}, {1}, 2};
  CHECK(oracle_forward(Dense{{1, 2, 1}, {1, 5}}, Dense{{2, 2, 1}, {1, 2, 3, 4}}, nullptr, grouped)
            .v == std::vector<double>{1, 2, 15, 20});
}

TEST_CASE("conv_transpose output_padding on uneven shards", "[conv_transpose][mp]") {
  run_ranks(4, [](RankContext&) {
    // L = 5 over 4 ranks: inputs 2, 2, 1, 0. O = 4*3 - 2 + 2 + 2 + 1 = 15: outputs 4, 4, 4, 3;
    // the last output (14) is output_padding alone (no input writes it: zero plus bias), and
    // rank 3 has no input but outputs to compute.
    check_case(named_case({2, 2, 5}, 4, {3}, {{3}, {1}, {2}, {1}, 1}, {4}, {Shard(2)}, 11));
    // Output padding reached through the dilation (output_padding >= stride, < dilation).
    check_case(named_case({1, 2, 3}, 2, {2}, {{1}, {0}, {1}, {2}, 2}, {4}, {Shard(2)}, 12));
    // 2-D on a 2x2 mesh, both dims sharded, uneven on both, output_padding on both.
    check_case(named_case({2, 3, 5, 3}, 3, {3, 2}, {{2, 3}, {1, 0}, {1, 2}, {1, 1}, 3}, {2, 2},
                          {Shard(2), Shard(3)}, 13));
    // One input over four ranks: three ranks hold nothing and receive everything.
    check_case(named_case({1, 1, 1}, 1, {4}, {{3}, {0}, {2}, {1}, 1}, {4}, {Shard(2)}, 14));
  });
}

TEST_CASE("conv_transpose rejects invalid arguments naming the parameter, on every rank",
          "[conv_transpose][mp]") {
  run_ranks(2, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    auto x = distribute_tensor(Tensor::rand({1, 4, 6}, DType::F64, 1), mesh, {Shard(2)});
    auto w = distribute_tensor(Tensor::rand({4, 2, 3}, DType::F64, 2), mesh, {Replicate()});
    auto expect = [&](const std::string& what, const std::optional<DTensor>& b,
                      const ConvTransposeParams& p, const DTensor* weight = nullptr) {
      INFO(what);
      try {
        conv_transpose(x, weight ? *weight : w, b, p);
        FAIL("expected InvalidArgument naming " << what);
      } catch (const InvalidArgument& e) {
        REQUIRE_THAT(std::string(e.what()), Catch::Contains(what + ":"));
      }
    };
    ConvTransposeParams p;
    p.stride = {2};
    p.output_padding = {2};
    expect("output_padding", std::nullopt, p);
    p = {};
    p.groups = 3;
    expect("groups", std::nullopt, p);
    p = {};
    p.stride = {0};
    expect("stride", std::nullopt, p);
    p = {};
    p.dilation = {0};
    expect("dilation", std::nullopt, p);
    p = {};
    p.padding = {5};
    expect("padding", std::nullopt, p);
    p = {};
    p.padding = {-1};
    expect("padding", std::nullopt, p);
    p = {};
    p.stride = {1, 2};
    expect("stride", std::nullopt, p);
    expect("bias", distribute_tensor(Tensor::rand({3}, DType::F64, 3), mesh, {Replicate()}), {});
    auto bad_w = distribute_tensor(Tensor::rand({3, 2, 3}, DType::F64, 4), mesh, {Replicate()});
    expect("weight", std::nullopt, {}, &bad_w);
    // Later calls still work (the ranks stayed in step).
    ConvTransposeParams ok;
    ok.stride = {2};
    ok.output_padding = {1};
    ok.groups = 2;
    auto y = conv_transpose(x, w, std::nullopt, ok);
    REQUIRE(y.shape() == Shape{1, 4, 14});
    REQUIRE(conv_transpose_output_shape({1, 4, 6}, {4, 2, 3}, ok) == Shape{1, 4, 14});
  });
}
