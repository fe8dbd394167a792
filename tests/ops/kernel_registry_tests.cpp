// The typed kernel table (dtensor/ops/kernel.h) and the CPU backend's
// normalisation kernels (dtensor/ops/kernels/norm.h), run directly on local
// tensors of every dtype against naive f64 loops written here: two-pass
// statistics per (sample, group), the closed forms of docs/operators.md.
#include <omp.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/conv.h"
#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/registry.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using kernels::NormLayout;

namespace {

struct Toy {
  int value = 0;
};
struct OtherToy {
  double value = 0;
};
constexpr KernelSlot<Toy> kToy{"test.toy_kernel"};
constexpr KernelSlot<OtherToy> kToyWrongArgs{"test.toy_kernel"};

std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::F64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

// A group_norm-shaped block [n, c, s] with `groups` statistics per sample.
NormLayout group_layout(std::int64_t n, std::int64_t c, std::int64_t s, std::int64_t groups) {
  NormLayout L;
  L.n = n;
  L.c = c;
  L.s = s;
  L.stats_per_sample = groups;
  L.group_size = c / groups;
  return L;
}

struct RefStats {
  std::vector<double> count, mean, var;
};
RefStats ref_stats(const std::vector<double>& x, const NormLayout& L) {
  RefStats r;
  const auto k = static_cast<std::size_t>(L.stats());
  r.count.assign(k, 0);
  r.mean.assign(k, 0);
  r.var.assign(k, 0);
  for (std::int64_t i = 0; i < L.n; ++i)
    for (std::int64_t ch = 0; ch < L.c; ++ch)
      for (std::int64_t sp = 0; sp < L.s; ++sp) {
        const auto st = static_cast<std::size_t>(L.stat(i, ch));
        r.count[st] += 1;
        r.mean[st] += x[static_cast<std::size_t>((i * L.c + ch) * L.s + sp)];
      }
  for (std::size_t st = 0; st < k; ++st)
    r.mean[st] /= r.count[st];
  for (std::int64_t i = 0; i < L.n; ++i)
    for (std::int64_t ch = 0; ch < L.c; ++ch)
      for (std::int64_t sp = 0; sp < L.s; ++sp) {
        const auto st = static_cast<std::size_t>(L.stat(i, ch));
        const double d = x[static_cast<std::size_t>((i * L.c + ch) * L.s + sp)] - r.mean[st];
        r.var[st] += d * d / r.count[st];
      }
  return r;
}

Tensor f64_of(const std::vector<double>& v) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(v.size())}, DType::F64);
  for (std::size_t k = 0; k < v.size(); ++k)
    t.data<double>()[k] = v[k];
  return t;
}

// Forward and backward of group_norm with batch statistics on one block, in
// `dtype`, against the f64 oracle; `offset` moves the mean far from zero.
// `gated`: the backward gets the fused relu's output and must count the
// gradient only where it is positive.
void check_group_norm(DType dtype, double offset, double tol, bool gated = false) {
  INFO("dtype " << dtype_name(dtype) << " offset " << offset << " gated " << gated);
  const NormLayout L = group_layout(2, 6, 301, 3);
  const Shape shape{L.n, L.c, L.s};
  Tensor X = Tensor::rand(shape, DType::F64, 3);
  for (std::int64_t k = 0; k < X.numel(); ++k)
    X.data<double>()[k] = X.data<double>()[k] * 2.0 + offset;
  X = X.to(dtype);
  const Tensor DY = Tensor::rand(shape, dtype, 4), W = Tensor::rand({L.c}, dtype, 5),
               B = Tensor::rand({L.c}, dtype, 6);
  const auto x = values(X), dy = values(DY), w = values(W), b = values(B);
  const RefStats ref = ref_stats(x, L);
  const double eps = 1e-5;

  Tensor moments = Tensor::empty({L.stats(), 3}, DType::F64);
  run_kernel(kernels::kNormMoments, DeviceType::CPU, dtype, {X, L, moments});
  std::vector<double> mean, invstd;
  for (std::int64_t st = 0; st < L.stats(); ++st) {
    const auto k = static_cast<std::size_t>(st);
    const double* m = moments.data<double>() + 3 * st;
    CHECK(m[0] == ref.count[k]);
    CHECK(std::abs(m[1] - ref.mean[k]) <= 1e-6 * std::max(1.0, std::abs(offset)));
    CHECK(std::abs(m[2] / m[0] - ref.var[k]) <= 1e-6 * ref.var[k] + 1e-12);
    mean.push_back(ref.mean[k]);
    invstd.push_back(1.0 / std::sqrt(ref.var[k] + eps));
  }

  kernels::NormApplyArgs apply;
  apply.x = X;
  apply.layout = L;
  apply.mean = f64_of(mean);
  apply.invstd = f64_of(invstd);
  apply.weight = W;
  apply.bias = B;
  apply.relu = true;
  apply.y = Tensor::empty(shape, dtype);
  run_kernel(kernels::kNormApply, DeviceType::CPU, dtype, apply);
  const auto y = values(apply.y);
  // The gradient the normalisation gets: dy, or dy where relu's output > 0.
  std::vector<double> dyg = dy;
  for (std::size_t k = 0; gated && k < dyg.size(); ++k)
    if (y[k] <= 0) dyg[k] = 0;

  kernels::NormBackwardApplyArgs back;
  back.grad_output = DY;
  back.x = X;
  back.layout = L;
  back.mean = apply.mean;
  back.invstd = apply.invstd;
  back.weight = W;
  if (gated) back.relu_output = apply.y;
  // Oracle: mean of g and of g * xhat per statistic.
  std::vector<double> mg(mean.size()), mgx(mean.size()), gw(6), gb(6);
  for (std::int64_t i = 0; i < L.n; ++i)
    for (std::int64_t ch = 0; ch < L.c; ++ch)
      for (std::int64_t sp = 0; sp < L.s; ++sp) {
        const auto at = static_cast<std::size_t>((i * L.c + ch) * L.s + sp);
        const auto st = static_cast<std::size_t>(L.stat(i, ch));
        const double xhat = (x[at] - mean[st]) * invstd[st];
        const double g = dyg[at] * w[static_cast<std::size_t>(ch)];
        mg[st] += g / ref.count[st];
        mgx[st] += g * xhat / ref.count[st];
        gw[static_cast<std::size_t>(ch)] += dyg[at] * xhat;
        gb[static_cast<std::size_t>(ch)] += dyg[at];
      }
  back.mean_g = f64_of(mg);
  back.mean_gxhat = f64_of(mgx);
  back.grad_input = Tensor::empty(shape, dtype);
  back.grad_weight = Tensor::empty({L.c}, dtype);
  back.grad_bias = Tensor::empty({L.c}, dtype);
  run_kernel(kernels::kNormBackwardApply, DeviceType::CPU, dtype, back);
  const auto gx = values(back.grad_input);
  const auto got_gw = values(back.grad_weight), got_gb = values(back.grad_bias);

  for (std::int64_t i = 0; i < L.n; ++i)
    for (std::int64_t ch = 0; ch < L.c; ++ch)
      for (std::int64_t sp = 0; sp < L.s; ++sp) {
        const auto at = static_cast<std::size_t>((i * L.c + ch) * L.s + sp);
        const auto st = static_cast<std::size_t>(L.stat(i, ch));
        const auto c = static_cast<std::size_t>(ch);
        const double xhat = (x[at] - mean[st]) * invstd[st];
        const double want_y = std::max(0.0, xhat * w[c] + b[c]);
        REQUIRE(std::abs(y[at] - want_y) <= tol * std::max(1.0, std::abs(want_y)));
        const double want_gx = invstd[st] * (dyg[at] * w[c] - mg[st] - xhat * mgx[st]);
        REQUIRE(std::abs(gx[at] - want_gx) <= tol * std::max(1.0, std::abs(want_gx)));
      }
  for (std::size_t c = 0; c < 6; ++c) {
    REQUIRE(std::abs(got_gw[c] - gw[c]) <= tol * std::max(1.0, std::abs(gw[c])) * 10);
    REQUIRE(std::abs(got_gb[c] - gb[c]) <= tol * std::max(1.0, std::abs(gb[c])) * 10);
  }

  // The backward's first pass: the moments again, and sum(g), sum(g (x - m)).
  Tensor packed = Tensor::empty({L.stats(), 5}, DType::F64);
  run_kernel(kernels::kNormBackwardReduce, DeviceType::CPU, dtype,
             {DY, X, L, W, packed, gated ? apply.y : Tensor()});
  for (std::int64_t st = 0; st < L.stats(); ++st) {
    const auto k = static_cast<std::size_t>(st);
    const double* r = packed.data<double>() + 5 * st;
    double g = 0, h = 0;
    for (std::int64_t i = 0; i < L.n; ++i)
      for (std::int64_t ch = 0; ch < L.c; ++ch)
        for (std::int64_t sp = 0; sp < L.s; ++sp) {
          if (L.stat(i, ch) != st) continue;
          const auto at = static_cast<std::size_t>((i * L.c + ch) * L.s + sp);
          const double gg = dyg[at] * w[static_cast<std::size_t>(ch)];
          g += gg;
          h += gg * (x[at] - r[1]);
        }
    REQUIRE(std::abs(r[1] - ref.mean[k]) <= 1e-6 * std::max(1.0, std::abs(offset)));
    REQUIRE(std::abs(r[3] - g) <= tol * std::max(1.0, std::abs(g)) * 10);
    REQUIRE(std::abs(r[4] - h) <= tol * std::max(1.0, std::abs(h)) * 10);
  }
}

}  // namespace

TEST_CASE("typed kernels: registered per device and dtype, looked up by their arguments type",
          "[ops][kernels]") {
  int seen = 0;
  register_kernel(kToy, DeviceType::CPU, DType::F32,
                  KernelFunction<Toy>([&](const Toy& t) { seen = t.value; }));
  run_kernel(kToy, DeviceType::CPU, DType::F32, Toy{7});
  REQUIRE(seen == 7);
  REQUIRE(has_kernel(kToy, DeviceType::CPU, DType::F32));
  REQUIRE_FALSE(has_kernel(kToy, DeviceType::CPU, DType::F64));
  // Twice needs override_existing; then the new one runs.
  REQUIRE_THROWS_AS(
      register_kernel(kToy, DeviceType::CPU, DType::F32, KernelFunction<Toy>([](const Toy&) {})),
      InvalidArgument);
  register_kernel(kToy, DeviceType::CPU, DType::F32,
                  KernelFunction<Toy>([&](const Toy& t) { seen = 2 * t.value; }), true);
  run_kernel(kToy, DeviceType::CPU, DType::F32, Toy{7});
  REQUIRE(seen == 14);
  // Missing: NotSupported naming the slot, the device and the dtype.
  try {
    run_kernel(kToy, DeviceType::CPU, DType::BF16, Toy{1});
    FAIL("no error");
  } catch (const NotSupported& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("test.toy_kernel") && Catch::Contains("bf16"));
  }
  // The same name with another arguments type is refused, not cast.
  REQUIRE_THROWS_AS(run_kernel(kToyWrongArgs, DeviceType::CPU, DType::F32, OtherToy{1.0}),
                    InvalidArgument);
  REQUIRE_THROWS_AS(register_kernel(kToyWrongArgs, DeviceType::CPU, DType::F32,
                                    KernelFunction<OtherToy>([](const OtherToy&) {}), true),
                    InvalidArgument);
  unregister_op(kToy.name);
  REQUIRE_FALSE(has_kernel(kToy, DeviceType::CPU, DType::F32));
}

TEST_CASE("norm kernels: every CPU dtype against f64 loops", "[ops][kernels][norm]") {
  check_group_norm(DType::F64, 0.0, 1e-12);
  check_group_norm(DType::F64, 1e4, 1e-10);
  check_group_norm(DType::F32, 0.0, 2e-6);
  // A mean far from zero: f32 data stays accurate to its own rounding.
  check_group_norm(DType::F32, 300.0, 2e-5);
  check_group_norm(DType::BF16, 0.0, 1e-2);
  check_group_norm(DType::F16, 0.0, 2e-3);
  // With the fused relu's output gating the backward's gradient.
  check_group_norm(DType::F64, 0.0, 1e-12, true);
  check_group_norm(DType::F32, 0.0, 2e-6, true);
  check_group_norm(DType::BF16, 0.0, 1e-2, true);
}

TEST_CASE("norm kernels: layer_norm's per-element parameter gradients in every CPU dtype",
          "[ops][kernels][norm]") {
  // Three samples add into each element's sums: the first writes them, the
  // others add (no zeroing pass); the 16-bit types sum in f32 and round once.
  NormLayout L;
  L.n = 3;
  L.c = 4;
  L.s = 37;
  L.stats_per_sample = 1;
  L.group_size = L.c;
  L.elementwise_affine = true;
  for (const auto& [dtype, tol] : {std::pair{DType::F64, 1e-12}, std::pair{DType::F32, 1e-5},
                                   std::pair{DType::BF16, 2e-2}, std::pair{DType::F16, 4e-3}}) {
    INFO("dtype " << dtype_name(dtype));
    const Shape shape{L.n, L.c, L.s};
    const Tensor X = Tensor::rand(shape, dtype, 11), DY = Tensor::rand(shape, dtype, 12),
                 W = Tensor::rand({L.params()}, dtype, 13);
    const auto x = values(X), dy = values(DY);
    const RefStats ref = ref_stats(x, L);
    std::vector<double> mean = ref.mean, invstd;
    for (double v : ref.var)
      invstd.push_back(1.0 / std::sqrt(v + 1e-5));
    kernels::NormBackwardApplyArgs back;
    back.grad_output = DY;
    back.x = X;
    back.layout = L;
    back.mean = f64_of(mean);
    back.invstd = f64_of(invstd);
    back.weight = W;
    // Garbage (NaN) where the sums go: the first sample must overwrite it.
    back.grad_weight = Tensor::full({L.params()}, std::nan(""), dtype);
    back.grad_bias = Tensor::full({L.params()}, std::nan(""), dtype);
    run_kernel(kernels::kNormBackwardApply, DeviceType::CPU, dtype, back);
    const auto gw = values(back.grad_weight), gb = values(back.grad_bias);
    for (std::int64_t e = 0; e < L.params(); ++e) {
      double want_w = 0, want_b = 0;
      for (std::int64_t i = 0; i < L.n; ++i) {
        const auto at = static_cast<std::size_t>(i * L.params() + e);
        const auto st = static_cast<std::size_t>(i);
        want_w += dy[at] * (x[at] - mean[st]) * invstd[st];
        want_b += dy[at];
      }
      const auto k = static_cast<std::size_t>(e);
      REQUIRE(std::abs(gw[k] - want_w) <= tol * std::max(1.0, std::abs(want_w)));
      REQUIRE(std::abs(gb[k] - want_b) <= tol * std::max(1.0, std::abs(want_b)));
    }
  }
}

TEST_CASE("norm kernels: moments of a view, read in place or copied, against f64 loops",
          "[ops][kernels][norm]") {
  // [2, 6, 9, 7] far from zero: narrowed along the first spatial dim (each
  // [sample, channel] row still contiguous, at a stride: read in place) and
  // along the last (rows broken: copied first). The oracle runs on a
  // contiguous copy of the same view.
  Tensor X = Tensor::rand({2, 6, 9, 7}, DType::F64, 21);
  for (std::int64_t k = 0; k < X.numel(); ++k)
    X.data<double>()[k] = X.data<double>()[k] * 3.0 + 250.0;
  for (DType dtype : {DType::F32, DType::F64}) {
    const Tensor x = X.to(dtype);
    for (const Tensor& view : {x.narrow(2, 2, 5), x.narrow(2, 0, 1), x.narrow(3, 1, 4)}) {
      INFO(dtype_name(dtype) << " view " << shape_str(view.shape()));
      const Shape& v = view.shape();
      const NormLayout L = group_layout(v[0], v[1], v[2] * v[3], 3);
      Tensor moments = Tensor::empty({L.stats(), 3}, DType::F64);
      run_kernel(kernels::kNormMoments, DeviceType::CPU, dtype, {view, L, moments});
      const RefStats ref = ref_stats(values(view.contiguous()), L);
      for (std::int64_t st = 0; st < L.stats(); ++st) {
        const auto k = static_cast<std::size_t>(st);
        const double* m = moments.data<double>() + 3 * st;
        CHECK(m[0] == ref.count[k]);
        CHECK(std::abs(m[1] - ref.mean[k]) <= 1e-5);
        CHECK(std::abs(m[2] / m[0] - ref.var[k]) <= 1e-5 * ref.var[k]);
      }
    }
  }
}

TEST_CASE("norm kernels: the result does not depend on the thread count", "[ops][kernels][norm]") {
  const NormLayout L = group_layout(4, 8, 4099, 4);
  const Tensor X = Tensor::rand({L.n, L.c, L.s}, DType::F32, 9);
  auto moments_with = [&](int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor m = Tensor::empty({L.stats(), 3}, DType::F64);
    run_kernel(kernels::kNormMoments, DeviceType::CPU, DType::F32, {X, L, m});
    omp_set_num_threads(before);
    return values(m);
  };
  REQUIRE(moments_with(1) == moments_with(3));
}

TEST_CASE("a user kernel registered for a built-in slot runs inside the built-in operator P=2",
          "[ops][kernels][norm][mp]") {
  dtensor::testing::run_ranks(2, [](dtensor::testing::RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor X = Tensor::rand({2, 4, 6, 5}, DType::F64, 11);
    const DTensor x = distribute_tensor(X, mesh, {Shard(2)});
    const Tensor before = group_norm(x, 2, std::nullopt, std::nullopt, 1e-5).full_tensor();
    // The override writes a constant: group_norm must return it everywhere,
    // with the statistics still merged across the ranks by the operator.
    int calls = 0;
    const auto builtin = find_kernel(kernels::kNormApply, DeviceType::CPU, DType::F64);
    register_kernel(kernels::kNormApply, DeviceType::CPU, DType::F64,
                    KernelFunction<kernels::NormApplyArgs>([&](const kernels::NormApplyArgs& a) {
                      ++calls;
                      REQUIRE(a.layout.stats() == 4);  // 2 samples x 2 groups
                      Tensor y = a.y;
                      y.fill_(7.0);
                    }),
                    true);
    const Tensor got = group_norm(x, 2, std::nullopt, std::nullopt, 1e-5).full_tensor();
    register_kernel(kernels::kNormApply, DeviceType::CPU, DType::F64, builtin, true);
    REQUIRE(calls == 1);
    REQUIRE(max_abs_diff(got, Tensor::full(X.shape(), 7.0, DType::F64)) == 0.0);
    REQUIRE(max_abs_diff(group_norm(x, 2, std::nullopt, std::nullopt, 1e-5).full_tensor(),
                         before) == 0.0);
  });
}

TEST_CASE(
    "a convolution backend registered in the conv slots runs the halo convolution's passes, "
    "behind its checks P=2",
    "[ops][kernels][conv][mp]") {
  dtensor::testing::run_ranks(2, [](dtensor::testing::RankContext& ctx) {
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor X = Tensor::rand({1, 3, 9, 8}, DType::F64, 21);
    const Tensor W = Tensor::rand({4, 3, 3, 3}, DType::F64, 22);
    const ConvParams p{{1}, {{1, 1}}, {1}, 1};
    const DTensor x = distribute_tensor(X, mesh, {Shard(2)});
    const DTensor w = distribute_tensor(W, mesh, {Replicate()});
    const Tensor before = convolution(x, w, std::nullopt, p).full_tensor();
    // A "backend" that reads whole tensors only: it gets the rank's window
    // assembled from its tiles (shard plus halo rows), counts its calls and
    // defers to the built-in kernels through the front of another dtype.
    const auto builtin = find_kernel(kernels::kConvForward, DeviceType::CPU, DType::F64);
    const auto builtin_data = find_kernel(kernels::kConvBackwardData, DeviceType::CPU, DType::F64);
    const auto builtin_weights =
        find_kernel(kernels::kConvBackwardWeights, DeviceType::CPU, DType::F64);
    int forwards = 0;
    std::vector<Shape> windows;
    kernels::register_dense_conv_kernels(
        DeviceType::CPU, DType::F64,
        {[&](const Tensor& xw, const Tensor& wt, const Tensor& b, const ConvParams& q) {
           ++forwards;
           windows.push_back(xw.shape());
           REQUIRE(xw.is_contiguous());
           const Tensor y = local_conv_kernels(Device::cpu(), DType::F32)
                                ->forward(xw.to(DType::F32), wt.to(DType::F32),
                                          b.defined() ? b.to(DType::F32) : b, q);
           return y.to(DType::F64);
         },
         [](const Tensor&, const Tensor&, const Shape& s, const ConvParams&) {
           return Tensor::zeros(s, DType::F64);
         },
         [](const Tensor&, const Tensor&, const Shape& s, const ConvParams&, bool) {
           return ConvWeightGrads{Tensor::zeros(s, DType::F64), Tensor()};
         }},
        /*override_existing=*/true);
    const Tensor got = convolution(x, w, std::nullopt, p).full_tensor();
    register_kernel(kernels::kConvForward, DeviceType::CPU, DType::F64, builtin, true);
    register_kernel(kernels::kConvBackwardData, DeviceType::CPU, DType::F64, builtin_data, true);
    register_kernel(kernels::kConvBackwardWeights, DeviceType::CPU, DType::F64, builtin_weights,
                    true);
    REQUIRE(forwards == 1);
    REQUIRE(windows.size() == 1);
    // 9 rows split 5 / 4, each window with the one halo row from the neighbour.
    CHECK(windows[0][2] == (ctx.rank == 0 ? 6 : 5));
    CHECK(max_abs_diff(got, before) < 1e-4);  // computed in f32 by the override
    CHECK(max_abs_diff(got, before) > 0.0);   // and not by the built-in f64 kernel
    REQUIRE(max_abs_diff(convolution(x, w, std::nullopt, p).full_tensor(), before) == 0.0);
  });
}
