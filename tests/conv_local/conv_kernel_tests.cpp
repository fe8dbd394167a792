// The registered local convolution kernels (Eigen f64, oneDNN f32/bf16, f16 via
// f32) against
// the naive f64 reference, over seeded random configurations: 1-3 spatial dims,
// strides 1-4, dilations 1-3, asymmetric padding 0-4, kernels 1-7, groups and
// depthwise, all three passes with and without bias.
//
// Tolerances are derived, not fitted (kernel_tolerance.h). The sweeps print how
// close the worst case came (WARN lines).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>

#include "dtensor/ops/local_conv.h"
#include "tests/conv_local/kernel_tolerance.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using dtensor::reference::ref_conv_forward;
using dtensor::reference::ref_conv_grad_bias;
using dtensor::reference::ref_conv_grad_input;
using dtensor::reference::ref_conv_grad_weight;
using dtensor::testing::kernel_tolerance;

namespace {

struct Config {
  Shape input, weight;
  ConvParams params;
  bool bias = true;

  std::string str() const {
    std::ostringstream os;
    os << "input " << shape_str(input) << " weight " << shape_str(weight) << " " << params.str()
       << (bias ? " +bias" : "");
    return os.str();
  }
  std::int64_t spatial() const { return static_cast<std::int64_t>(input.size()) - 2; }
};

std::int64_t prod(const Shape& s, std::size_t from) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < s.size(); ++i)
    n *= s[i];
  return n;
}

// Multiply-adds of the forward pass, to keep the naive reference cheap.
std::int64_t macs(const Config& c) {
  const Shape out = conv_output_shape(c.input, c.weight, c.params);
  return prod(out, 0) * prod(c.weight, 1);
}

Config random_config(std::mt19937_64& rng) {
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (;;) {
    Config c;
    const std::int64_t nsp = uni(1, 3);
    const std::int64_t max_k = nsp == 1 ? 7 : nsp == 2 ? 5 : 3;
    const std::int64_t max_d = nsp == 3 ? 2 : 3;
    const int group_kind = static_cast<int>(uni(0, 3));  // 0,1: dense; 2: grouped; 3: depthwise
    std::int64_t groups = 1, cg = uni(1, 4), ocg = uni(1, 4);
    if (group_kind == 2) {
      groups = uni(2, 3);
      cg = uni(1, 3);
      ocg = uni(1, 3);
    } else if (group_kind == 3) {
      groups = uni(2, 6);
      cg = 1;
      ocg = uni(1, 2);  // channel multiplier
    }
    const std::int64_t batch = uni(1, 2);
    c.input = {batch, groups * cg};
    c.weight = {groups * ocg, cg};
    c.params.groups = groups;
    c.params.stride.clear();
    c.params.dilation.clear();
    c.params.padding.clear();
    for (std::int64_t i = 0; i < nsp; ++i) {
      const std::int64_t k = uni(1, max_k), s = uni(1, 4), d = uni(1, max_d);
      const std::int64_t pl = uni(0, 4), pr = uni(0, 4);
      const std::int64_t extent = d * (k - 1) + 1;
      const std::int64_t min_len = std::max<std::int64_t>(1, extent - pl - pr);
      c.input.push_back(min_len + uni(0, nsp == 1 ? 24 : nsp == 2 ? 10 : 5));
      c.weight.push_back(k);
      c.params.stride.push_back(s);
      c.params.dilation.push_back(d);
      c.params.padding.emplace_back(pl, pr);
    }
    c.bias = uni(0, 3) != 0;
    if (macs(c) <= 400000) return c;
  }
}

struct Worst {
  double ratio = 0;  // largest error / tolerance seen
  void note(double err, double tol) { ratio = std::max(ratio, err / tol); }
};

void check_close(const Tensor& got, const Tensor& ref, double tol, const char* what, Worst& worst) {
  INFO(what << ": got " << got.str() << ", reference " << ref.str());
  REQUIRE(got.shape() == ref.shape());
  const double err = max_abs_diff(got, ref);
  INFO(what << ": max |error| " << err << ", tolerance " << tol);
  CHECK(err <= tol);
  if (std::getenv("DTENSOR_CONV_TEST_VERBOSE") && err / tol > 0.3)
    std::cout << what << " " << got.str() << " err " << err << " tol " << tol << " ref_max "
              << max_abs(ref) << "\n";
  worst.note(err, tol);
}

// Runs the three passes of `kernels` on `c` in dtype `t` and compares them with
// the reference computed on the very same (rounded) values.
void check_config(const LocalConvKernels& kernels, const Config& c, DType t, std::uint64_t seed,
                  Worst& worst) {
  INFO(kernels.name() << " " << dtype_name(t) << " " << c.str());
  const Tensor x = Tensor::rand(c.input, t, seed);
  const Tensor w = Tensor::rand(c.weight, t, seed + 1);
  const Tensor b = c.bias ? Tensor::rand({c.weight[0]}, t, seed + 2) : Tensor();
  const Shape out_shape = conv_output_shape(c.input, c.weight, c.params);
  const Tensor gy = Tensor::rand(out_shape, t, seed + 3);

  const std::int64_t ksize = prod(c.weight, 2);
  const std::int64_t cg = c.weight[1], ocg = c.weight[0] / c.params.groups;
  const std::int64_t out_size = prod(out_shape, 2);

  const Tensor y = kernels.forward(x, w, b, c.params);
  CHECK(y.dtype() == t);
  const Tensor y_ref = ref_conv_forward(x, w, b, c.params);
  check_close(y, y_ref, kernel_tolerance(t, cg * ksize, max_abs(y_ref)), "forward", worst);

  const Tensor gx = kernels.backward_data(gy, w, c.input, c.params);
  CHECK(gx.dtype() == t);
  const Tensor gx_ref = ref_conv_grad_input(gy, w, c.input, c.params);
  check_close(gx, gx_ref, kernel_tolerance(t, ocg * ksize, max_abs(gx_ref)), "backward_data",
              worst);

  const ConvWeightGrads g = kernels.backward_weights(gy, x, c.weight, c.params, c.bias);
  const Tensor gw_ref = ref_conv_grad_weight(gy, x, c.weight, c.params);
  check_close(g.grad_weight, gw_ref, kernel_tolerance(t, c.input[0] * out_size, max_abs(gw_ref)),
              "backward_weights", worst);
  if (c.bias) {
    const Tensor gb_ref = ref_conv_grad_bias(gy);
    check_close(g.grad_bias, gb_ref, kernel_tolerance(t, c.input[0] * out_size, max_abs(gb_ref)),
                "grad_bias", worst);
  } else {
    CHECK_FALSE(g.grad_bias.defined());
  }
}

void random_sweep(DType t, int configs, std::uint64_t seed) {
  const auto kernels = local_conv_kernels(Device::cpu(), t);
  std::mt19937_64 rng(seed);
  Worst worst;
  for (int i = 0; i < configs; ++i) {
    const Config c = random_config(rng);
    INFO("config " << i);
    check_config(*kernels, c, t, seed * 1000 + static_cast<std::uint64_t>(i), worst);
  }
  // How close the worst case came to the bound, for the record.
  WARN(kernels->name() << " " << dtype_name(t) << ": worst error / tolerance over " << configs
                       << " configs = " << worst.ratio);
}

}  // namespace

TEST_CASE(
    "local conv kernels: Eigen f64 matches the reference on random configs (1-3 dims, "
    "stride, dilation, asymmetric padding, groups, depthwise, all passes)",
    "[kernels][f64]") {
  random_sweep(DType::F64, 150, 11);
}

TEST_CASE("local conv kernels: oneDNN f32 matches the reference on random configs (all passes)",
          "[kernels][f32]") {
  random_sweep(DType::F32, 150, 12);
}

TEST_CASE(
    "local conv kernels: oneDNN bf16 matches the reference within bf16 rounding "
    "(all passes)",
    "[kernels][bf16]") {
  random_sweep(DType::BF16, 100, 13);
}

TEST_CASE(
    "local conv kernels: f16 (computed in f32, rounded once) matches the reference within "
    "f16 rounding (all passes)",
    "[kernels][f16]") {
  random_sweep(DType::F16, 60, 14);
}

TEST_CASE(
    "local conv kernels: fixed shapes at the extremes (kernel 7, dilation 3, stride 4, "
    "padding wider than the kernel, 1x1, depthwise 3-D, blocked layouts)",
    "[kernels]") {
  std::vector<Config> configs;
  auto add = [&](Shape in, Shape w, ConvParams p, bool bias = true) {
    configs.push_back(Config{std::move(in), std::move(w), std::move(p), bias});
  };
  add({1, 2, 30}, {3, 2, 7}, ConvParams{{1}, {{3, 3}}, {3}, 1});
  add({2, 3, 9}, {2, 3, 2}, ConvParams{{4}, {{0, 4}}, {1}, 1});
  add({1, 1, 3}, {1, 1, 3}, ConvParams{{1}, {{4, 4}}, {1}, 1});  // padding > kernel
  add({1, 4, 5, 6}, {8, 4, 1, 1}, ConvParams{}, false);          // 1x1
  add({1, 4, 7, 6}, {4, 2, 3, 2}, ConvParams{{2, 1}, {{1, 0}, {0, 2}}, {1, 2}, 2});
  add({2, 3, 5, 6, 4}, {6, 1, 3, 3, 2},
      ConvParams{{1, 2, 1}, {{1, 1}, {0, 2}, {1, 0}}, {1, 1, 2}, 3});
  // Channel counts that make oneDNN choose its blocked-layout JIT kernels, so the
  // reorders between plain and blocked layouts are exercised too.
  add({1, 32, 12, 13}, {32, 32, 3, 3}, ConvParams{{1}, {{1, 2}, {0, 1}}, {1}, 1});
  add({2, 16, 10, 9}, {32, 16, 3, 2}, ConvParams{{2, 1}, {{1, 1}}, {1, 2}, 1});
  add({1, 32, 11, 12}, {32, 1, 3, 3}, ConvParams{{1}, {{1, 1}}, {2}, 32});  // depthwise
  // Depthwise kernels wider than 3x3, stride 1 (f32: the library's own weight
  // gradient, as oneDNN's depthwise JIT stops at 3x3): widths below, at and
  // above one 16-lane vector, padding wider than the kernel, 1xk and kx1.
  add({2, 24, 19, 37}, {24, 1, 7, 7}, ConvParams{{1}, {{3, 2}, {1, 4}}, {1}, 24});
  add({1, 16, 9, 16}, {16, 1, 1, 5}, ConvParams{{1}, {{0, 0}, {2, 2}}, {1}, 16}, false);
  add({1, 8, 12, 5}, {8, 1, 5, 2}, ConvParams{{1}, {{6, 6}, {0, 1}}, {1}, 8});
  add({1, 4, 40, 70}, {4, 1, 9, 8}, ConvParams{{1}, {{4, 4}, {3, 4}}, {1}, 4});
  add({1, 32, 40}, {64, 16, 5}, ConvParams{{1}, {{4, 0}}, {1}, 2});
  add({1, 16, 6, 7, 5}, {16, 16, 3, 3, 3}, ConvParams{{1}, {{1, 1}, {2, 0}, {0, 1}}, {1}, 1});
  // Large enough for the Eigen kernel to split the output into several column
  // tiles (uneven last tile), cheap for the reference (one channel).
  add({1, 1, 400, 180}, {1, 1, 7, 7}, ConvParams{{2, 1}, {{3, 1}, {0, 2}}, {1, 1}, 1});
  add({1, 1, 100, 101, 70}, {1, 1, 3, 3, 3}, ConvParams{{1}, {{1, 0}, {0, 1}, {2, 2}}, {1}, 1});
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    const auto kernels = local_conv_kernels(Device::cpu(), t);
    Worst worst;
    for (std::size_t i = 0; i < configs.size(); ++i)
      check_config(*kernels, configs[i], t, 500 + i, worst);
  }
}

TEST_CASE("local conv kernels: non-contiguous inputs (halo window views) give the same result",
          "[kernels]") {
  for (DType t : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const auto kernels = local_conv_kernels(Device::cpu(), t);
    const Tensor full = Tensor::rand({2, 3, 6, 20}, t, 5);
    const Tensor window = full.narrow(3, 4, 11);  // a strided view, as the halo path makes
    REQUIRE_FALSE(window.is_contiguous());
    const Tensor w = Tensor::rand({4, 3, 3, 3}, t, 6);
    ConvParams p{{1, 2}, {{1, 1}, {0, 1}}, {1, 1}, 1};
    const Tensor a = kernels->forward(window, w, Tensor(), p);
    const Tensor b = kernels->forward(window.contiguous(), w, Tensor(), p);
    CHECK(max_abs_diff(a, b) == 0.0);
    const ConvWeightGrads ga = kernels->backward_weights(a, window, w.shape(), p, true);
    const ConvWeightGrads gb =
        kernels->backward_weights(b, window.contiguous(), w.shape(), p, true);
    CHECK(max_abs_diff(ga.grad_weight, gb.grad_weight) == 0.0);
  }
}

TEST_CASE(
    "local conv kernels: degenerate operands (window wholly in padding, empty batch, "
    "empty channels) give bias-only outputs and zero gradients",
    "[kernels]") {
  for (DType t : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(t));
    const auto kernels = local_conv_kernels(Device::cpu(), t);
    const Tensor w = Tensor::rand({3, 2, 3}, t, 1);
    const Tensor b = Tensor::rand({3}, t, 2);
    ConvParams p{{1}, {{5, 0}}, {1}, 1};
    // A zero-length window with padding (5, 0): three outputs that read only padding.
    const Tensor x = Tensor::empty({2, 2, 0}, t);
    const Tensor y = kernels->forward(x, w, b, p);
    REQUIRE(y.shape() == Shape{2, 3, 3});
    for (std::int64_t c = 0; c < 3; ++c)
      CHECK(y.item({1, c, 2}) == b.item({c}));
    const Tensor gy = Tensor::rand({2, 3, 3}, t, 3);
    CHECK(kernels->backward_data(gy, w, x.shape(), p).shape() == x.shape());
    const ConvWeightGrads g = kernels->backward_weights(gy, x, w.shape(), p, true);
    CHECK(max_abs(g.grad_weight) == 0.0);
    CHECK(max_abs_diff(g.grad_bias, ref_conv_grad_bias(gy)) <= kernel_tolerance(t, 6, 6.0));
    // Empty batch.
    const Tensor x0 = Tensor::empty({0, 2, 8}, t);
    CHECK(kernels->forward(x0, w, b, p).shape() == Shape{0, 3, 11});
    CHECK(max_abs(kernels->backward_weights(Tensor::empty({0, 3, 11}, t), x0, w.shape(), p, false)
                      .grad_weight) == 0.0);
  }
}

TEST_CASE(
    "local conv kernels: registry reports missing (device, dtype) as NotSupported naming "
    "both, and accepts replacements",
    "[kernels][registry]") {
  CHECK(has_local_conv_kernels(DeviceType::CPU, DType::F32));
  CHECK(has_local_conv_kernels(DeviceType::CPU, DType::BF16));
  CHECK(has_local_conv_kernels(DeviceType::CPU, DType::F16));
  CHECK(has_local_conv_kernels(DeviceType::CPU, DType::F64));
  if (!has_local_conv_kernels(DeviceType::CUDA, DType::F64)) {
    CHECK_THROWS_AS(local_conv_kernels(Device::cuda(0), DType::F64), NotSupported);
    CHECK_THROWS_WITH(local_conv_kernels(Device::cuda(0), DType::F64),
                      Catch::Contains("cuda") && Catch::Contains("f64"));
  }
  CHECK(local_conv_kernels(Device::cpu(), DType::F64)->name() == "cpu f64");
  CHECK(local_conv_kernels(Device::cpu(), DType::F32)->name() == "cpu f32");
  // Mixed dtypes are the caller's error, named; so are operands of another
  // dtype than the kernels'.
  const auto k = local_conv_kernels(Device::cpu(), DType::F32);
  CHECK_THROWS_WITH(k->forward(Tensor::rand({1, 1, 4}, DType::F32, 1),
                               Tensor::rand({1, 1, 3}, DType::F64, 1), Tensor(), ConvParams{}),
                    Catch::Contains("weight") && Catch::Contains("dtype"));
  CHECK_THROWS_WITH(k->forward(Tensor::rand({1, 1, 4}, DType::F64, 1),
                               Tensor::rand({1, 1, 3}, DType::F64, 1), Tensor(), ConvParams{}),
                    Catch::Contains("input") && Catch::Contains("cpu f32"));
}

// Not a test: `dtensor_conv_local_tests "[.bench]"` prints kernel timings.
TEST_CASE("local conv kernels: timings", "[.bench]") {
  struct Case {
    const char* name;
    Shape in, w;
    ConvParams p;
  };
  const std::vector<Case> cases = {
      {"2-D 64->64 3x3 56x56 N=1",
       {1, 64, 56, 56},
       {64, 64, 3, 3},
       ConvParams{{1}, {{1, 1}}, {1}, 1}},
      {"3-D 16->16 3x3x3 32^3 N=1",
       {1, 16, 32, 32, 32},
       {16, 16, 3, 3, 3},
       ConvParams{{1}, {{1, 1}}, {1}, 1}},
      {"1-D 32->32 k7 4096 N=4", {4, 32, 4096}, {32, 32, 7}, ConvParams{{1}, {{3, 3}}, {1}, 1}},
  };
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    const auto kernels = local_conv_kernels(Device::cpu(), t);
    for (const auto& c : cases) {
      const Tensor x = Tensor::rand(c.in, t, 1), w = Tensor::rand(c.w, t, 2);
      const Tensor b = Tensor::rand({c.w[0]}, t, 3);
      const Shape os = conv_output_shape(c.in, c.w, c.p);
      const Tensor gy = Tensor::rand(os, t, 4);
      const double flops = 2.0 * static_cast<double>(prod(os, 0) * prod(c.w, 1));
      auto time = [&](auto&& f) {
        f();  // warm-up: primitive creation, caches
        const int reps = 3;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i)
          f();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      };
      const double tf = time([&] { kernels->forward(x, w, b, c.p); });
      const double td = time([&] { kernels->backward_data(gy, w, c.in, c.p); });
      const double tw = time([&] { kernels->backward_weights(gy, x, c.w, c.p, true); });
      std::cout << kernels->name() << " " << dtype_name(t) << " " << c.name << ": fwd " << tf * 1e3
                << " ms (" << flops / tf * 1e-9 << " GFLOP/s), bwd_data " << td * 1e3
                << " ms, bwd_weights " << tw * 1e3 << " ms\n";
    }
  }
}
