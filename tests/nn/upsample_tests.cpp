// upsample (nearest, linear; by size or scale factor; align_corners both
// ways; 1 to 3 spatial dims) against naive f64 loops written here from
// PyTorch's UpSample.h index rules, over seeded random configurations on
// meshes 2, 3, 4 and 2x2 (uneven and empty shards, spatial, batch and channel
// sharding, Partial inputs), forward and backward; plus values PyTorch gives.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/upsample.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

// One dim's source: inputs a, b with weights wa, wb.
struct Src {
  std::int64_t a, b;
  double wa, wb;
};

// PyTorch, written out again (checked against PyTorch 1.13 and 2.15): the
// nearest forward is always floor(o * scale); the nearest backward
// (nearest_idx) copies at O = L and halves at O = 2L; linear copies at O = L
// whatever the scale factor.
Src source(bool linear, bool align_corners, double sf, std::int64_t L, std::int64_t O,
           std::int64_t o, bool backward) {
  if (linear && O == L) return {o, o, 1.0, 0.0};
  if (!linear) {
    std::int64_t i;
    if (backward && O == L) {
      i = o;
    } else if (backward && O == 2 * L) {
      i = o / 2;
    } else {
      float scale =
          sf > 0 ? static_cast<float>(1.0 / sf) : static_cast<float>(L) / static_cast<float>(O);
      float v = std::floor(static_cast<float>(o) * scale);
      i = std::min<std::int64_t>(static_cast<std::int64_t>(v), L - 1);
    }
    return {i, i, 1.0, 0.0};
  }
  double real;
  if (align_corners) {
    real = O > 1 ? static_cast<double>(L - 1) / static_cast<double>(O - 1) * static_cast<double>(o)
                 : 0.0;
  } else {
    const double scale = sf > 0 ? 1.0 / sf : static_cast<double>(L) / static_cast<double>(O);
    real = std::max(scale * (static_cast<double>(o) + 0.5) - 0.5, 0.0);
  }
  const auto a = static_cast<std::int64_t>(std::floor(real));
  const std::int64_t b = a < L - 1 ? a + 1 : a;
  const double l = real - static_cast<double>(a);
  return {a, b, 1.0 - l, l};
}

struct Case {
  Shape input;
  UpsampleParams p;
  Shape out;
  Placements placements;
  std::uint64_t seed = 0;
  std::string str() const {
    return fmt::format("input {} -> {} {} placements {} seed {}", shape_str(input), shape_str(out),
                       p.str(), placements_str(placements), seed);
  }
};

// The per-dim sources of every output, then the forward / backward loops.
std::vector<std::vector<Src>> sources(const Case& c, bool backward) {
  std::vector<std::vector<Src>> out;
  const bool lin = c.p.mode == UpsampleMode::Linear;
  for (std::size_t d = 2; d < c.input.size(); ++d) {
    const double sf = c.p.scale_factor.empty() ? 0.0 : c.p.scale_factor[d - 2];
    std::vector<Src> v;
    for (std::int64_t o = 0; o < c.out[d]; ++o)
      v.push_back(source(lin, c.p.align_corners, sf, c.input[d], c.out[d], o, backward));
    out.push_back(v);
  }
  return out;
}

// fn(flat output index, flat input index, weight) over every output's taps.
template <typename Fn>
void each_tap(const Case& c, bool backward, Fn&& fn) {
  const auto src = sources(c, backward);
  const std::size_t nsp = src.size();
  const Shape xs = strides_of(c.input), ys = strides_of(c.out);
  const std::int64_t total = shape_numel(c.out);
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t rem = flat;
    std::vector<std::int64_t> idx(c.out.size());
    for (std::size_t k = 0; k < c.out.size(); ++k) {
      idx[k] = rem / ys[k];
      rem %= ys[k];
    }
    for (int mask = 0; mask < (1 << nsp); ++mask) {
      std::int64_t in = idx[0] * xs[0] + idx[1] * xs[1];
      double w = 1;
      for (std::size_t d = 0; d < nsp; ++d) {
        const Src& s = src[d][static_cast<std::size_t>(idx[d + 2])];
        const bool hi = (mask >> d) & 1;
        in += (hi ? s.b : s.a) * xs[d + 2];
        w *= hi ? s.wb : s.wa;
      }
      fn(flat, in, w);
    }
  }
}

Tensor ref_forward(const Case& c, const Tensor& X) {
  Tensor Y = Tensor::zeros(c.out, DType::F64);
  const Tensor x = X.to(DType::F64);
  double* y = Y.data<double>();
  const double* px = x.data<double>();
  each_tap(c, false, [&](std::int64_t o, std::int64_t i, double w) { y[o] += w * px[i]; });
  return Y;
}

Tensor ref_backward(const Case& c, const Tensor& GY) {
  Tensor GX = Tensor::zeros(c.input, DType::F64);
  const Tensor gy = GY.to(DType::F64);
  double* gx = GX.data<double>();
  const double* g = gy.data<double>();
  each_tap(c, true, [&](std::int64_t o, std::int64_t i, double w) { gx[i] += w * g[o]; });
  return GX;
}

Case random_case(Rng& rng, const Shape& mesh) {
  Case c;
  c.seed = rng();
  const std::int64_t nsp = uni(rng, 1, 3);
  const std::int64_t max_len = nsp == 1 ? 13 : nsp == 2 ? 7 : 4;
  c.input = {uni(rng, 1, 3), uni(rng, 1, 3)};
  c.out = c.input;
  c.p.mode = uni(rng, 0, 1) ? UpsampleMode::Linear : UpsampleMode::Nearest;
  c.p.align_corners = c.p.mode == UpsampleMode::Linear && uni(rng, 0, 1);
  const bool by_scale = uni(rng, 0, 1);
  for (std::int64_t d = 0; d < nsp; ++d) {
    const std::int64_t L = uni(rng, 1, max_len);
    c.input.push_back(L);
    if (by_scale) {
      // Integer and non-integer factors, down and up.
      static const double kScales[] = {0.5, 0.75, 1.0, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0, 0.9, 2.25};
      double sf = kScales[uni(rng, 0, 10)];
      if (std::floor(static_cast<double>(L) * sf) < 1) sf = 1.5;
      c.p.scale_factor.push_back(sf);
      c.out.push_back(static_cast<std::int64_t>(std::floor(static_cast<double>(L) * sf)));
    } else {
      const std::int64_t O = uni(rng, 1, 3 * L + 1);
      c.p.size.push_back(O);
      c.out.push_back(O);
    }
  }
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(c.input.size()); ++d)
    if (d >= 2 || uni(rng, 0, 2) == 0) dims.push_back(d);
  c.placements = random_placements(rng, mesh, dims, 80, 8);
  return c;
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Tensor X = Tensor::rand(c.input, dtype, c.seed);
  const double tol = dtype == DType::F64 ? 1e-12 : 1e-5;
  const DTensor x = distribute_tensor(X, mesh, c.placements);
  const DTensor y = upsample(x, c.p);
  REQUIRE(y.shape() == c.out);
  require_close(y.full_tensor(), ref_forward(c, X), tol, "output");

  Placements gp = y.placements();
  const Tensor GY = Tensor::rand(c.out, dtype, c.seed + 1);
  const DTensor gy = distribute_tensor(GY, mesh, gp);
  const DTensor gx = upsample_backward(gy, x, c.p);
  for (std::size_t m = 0; m < gp.size(); ++m)
    if (!x.placements()[m].is_partial()) CHECK(gx.placements()[m] == x.placements()[m]);
  require_close(gx.full_tensor(), ref_backward(c, GY), tol * 4, "grad_input");
}

struct Batch {
  Shape mesh;
  DType dtype;
  int configs;
};

DTENSOR_TEST_REGISTRAR {
  for (const Batch& b :
       {Batch{{2}, DType::F64, 30}, Batch{{3}, DType::F64, 30}, Batch{{4}, DType::F64, 25},
        Batch{{2, 2}, DType::F64, 25}, Batch{{2}, DType::F32, 10}}) {
    const std::string name = fmt::format("nn upsample differential {} mesh {} ({} configs)",
                                         dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[nn][upsample][mp]", [=] {
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

  register_test("nn upsample: values PyTorch gives and argument errors", "[nn][upsample][mp]", [] {
    run_ranks(2, [](RankContext&) {
      DeviceMesh mesh(DeviceType::CPU, {2});
      Tensor X = Tensor::empty({1, 1, 4}, DType::F64);
      for (int i = 0; i < 4; ++i)
        X.data<double>()[i] = i + 1;
      const DTensor x = distribute_tensor(X, mesh, {Shard(2)});
      auto values = [](const DTensor& y) {
        const Tensor t = y.full_tensor();
        std::vector<double> v;
        for (std::int64_t i = 0; i < t.numel(); ++i)
          v.push_back(std::round(t.item_flat(i) * 1e4) / 1e4);
        return v;
      };
      // F.interpolate(torch.tensor([[[1., 2, 3, 4]]]), size=6, mode="linear")
      UpsampleParams lin{UpsampleMode::Linear, {6}, {}, false};
      CHECK(values(upsample(x, lin)) == std::vector<double>{1, 1.5, 2.1667, 2.8333, 3.5, 4});
      // ... align_corners=True
      lin.align_corners = true;
      CHECK(values(upsample(x, lin)) == std::vector<double>{1, 1.6, 2.2, 2.8, 3.4, 4});
      // scale_factor=1.5, mode="nearest" -> [1, 1, 2, 3, 3, 4]
      UpsampleParams near{UpsampleMode::Nearest, {}, {1.5}, false};
      CHECK(values(upsample(x, near)) == std::vector<double>{1, 1, 2, 3, 3, 4});
      // size=3, nearest (scale 4/3) -> [1, 2, 3]
      near = {UpsampleMode::Nearest, {3}, {}, false};
      CHECK(values(upsample(x, near)) == std::vector<double>{1, 2, 3});
      // scale_factor=0.5, linear -> [1.5, 3.5]
      lin = {UpsampleMode::Linear, {}, {0.5}, false};
      CHECK(values(upsample(x, lin)) == std::vector<double>{1.5, 3.5});
      // Checked with PyTorch 1.13 and 2.15: scale_factor=2.1, nearest (O = 2L,
      // but the forward still reads floor(o / 2.1)) -> [1, 1, 1, 2, 2, 3, 3, 4];
      // its backward of ones halves instead -> [2, 2, 2, 2].
      near = {UpsampleMode::Nearest, {}, {2.1}, false};
      const DTensor y21 = upsample(x, near);
      CHECK(values(y21) == std::vector<double>{1, 1, 1, 2, 2, 3, 3, 4});
      const DTensor ones =
          distribute_tensor(Tensor::full({1, 1, 8}, 1.0, DType::F64), mesh, y21.placements());
      CHECK(values(upsample_backward(ones, x, near)) == std::vector<double>{2, 2, 2, 2});
      // scale_factor=1.1, linear (O = L): a copy, whatever the scale says.
      lin = {UpsampleMode::Linear, {}, {1.1}, false};
      CHECK(values(upsample(x, lin)) == std::vector<double>{1, 2, 3, 4});

      CHECK_THROWS_WITH(upsample(x, {UpsampleMode::Nearest, {6}, {}, true}),
                        Catch::Contains("align_corners"));
      CHECK_THROWS_WITH(upsample(x, {UpsampleMode::Linear, {6}, {2.0}, false}),
                        Catch::Contains("size"));
      CHECK_THROWS_WITH(upsample(x, {UpsampleMode::Linear, {}, {0.1}, false}),
                        Catch::Contains("greater than 0"));
    });
  });
}

}  // namespace
