// The CUDA kernels of the library's kernel slots (dtensor/ops/kernels/*.h)
// against the CPU kernels of the same slots on the same random inputs: the
// CPU kernels are tested against naive f64 loops (tests/ops), so agreeing
// with them within the dtype's tolerance (tests/ops/kernel_oracle.h) is the
// contract. Without a CUDA device each test prints why it skipped and passes
// (DTENSOR_REQUIRE_GPU=1 makes that a failure, as in gpu_tests.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/ops/kernels/channel.h"
#include "dtensor/ops/kernels/loss.h"
#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/kernels/optim.h"
#include "dtensor/ops/kernels/pool.h"
#include "dtensor/ops/kernels/upsample.h"
#include "tests/ops/kernel_oracle.h"

using namespace dtensor;
using testing_kernels::tolerance;
using testing_kernels::values;

namespace {

bool gpu_or_skip() {
  if (cuda::device_count() >= 1) return true;
  const std::string why = cuda::unavailable_reason();
  const char* req = std::getenv("DTENSOR_REQUIRE_GPU");
  if (req && std::string(req) == "1") FAIL("GPU required (DTENSOR_REQUIRE_GPU=1): " << why);
  WARN("skipped, no GPU: " << why);
  return false;
}

const DType kDTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16};

Tensor gpu(const Tensor& t) {
  return t.defined() ? t.to(Device::cuda(0)) : t;
}

// Uniform in [lo, hi) of dtype `dt` on the host.
Tensor random(const Shape& shape, DType dt, std::uint64_t seed, double lo = -1, double hi = 1) {
  const Tensor u = Tensor::rand(shape, DType::F64, seed);
  Tensor out = Tensor::empty(shape, DType::F64);
  for (std::int64_t i = 0; i < u.numel(); ++i)
    out.data<double>()[i] = lo + (u.data<double>()[i] + 1) / 2 * (hi - lo);
  return out.to(dt);
}

// The CUDA kernel's result (any device) against the CPU kernel's: every
// element within the dtype's tolerance, relative to the larger of 1 and the
// CPU result's largest magnitude (statistics and sums are sums of many terms).
// NaN must meet NaN.
void check_close(const Tensor& from_gpu, const Tensor& from_cpu, DType dt,
                 const std::string& what) {
  const auto g = values(from_gpu.to(Device::cpu())), c = values(from_cpu);
  REQUIRE(g.size() == c.size());
  double scale = 1;
  for (double v : c)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i]) || std::isnan(g[i])) {
      INFO(what << " (" << dtype_name(dt) << ") element " << i << ": " << g[i] << " vs " << c[i]);
      CHECK(std::isnan(c[i]) == std::isnan(g[i]));
      continue;
    }
    const double e = c[i] == g[i] ? 0.0 : std::abs(g[i] - c[i]) / scale;
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  INFO(what << " (" << dtype_name(dt) << "): worst at element " << at << ", relative error "
            << worst);
  CHECK(worst <= tolerance(dt));
}

// Pool taps of one dim: output o reads o * stride - pad + k * dilation for
// k < kernel, the positions inside [0, window) only (as tests/ops).
kernels::PoolTaps sliding(std::int64_t window, std::int64_t kernel, std::int64_t stride,
                          std::int64_t pad, std::int64_t dilation) {
  kernels::PoolTaps t;
  const std::int64_t span = (kernel - 1) * dilation + 1;
  for (std::int64_t o = 0; o * stride - pad + span <= window + pad; ++o) {
    std::vector<std::int64_t> taps;
    for (std::int64_t k = 0; k < kernel; ++k) {
      const std::int64_t i = o * stride - pad + k * dilation;
      if (i >= 0 && i < window) taps.push_back(i);
    }
    t.taps.push_back(taps);
    t.padded_size.push_back(kernel);
  }
  return t;
}

// Values on a coarse grid (ties for max_pool's first-maximum rule), with NaN
// and -inf sprinkled in when `specials`.
Tensor grid_values(const Shape& shape, DType dt, std::uint64_t seed, bool specials) {
  const Tensor u = Tensor::rand(shape, DType::F64, seed);
  Tensor t = Tensor::empty(shape, DType::F64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    p[i] = std::round(u.data<double>()[i] * 3) * 0.5;
    if (specials && i % 17 == 5) p[i] = std::nan("");
    if (specials && i % 13 == 7) p[i] = -INFINITY;
  }
  return t.to(dt);
}

// Random taps of one dim of an interpolation (as tests/ops): any positions
// of the window, weights in [-1, 1).
kernels::ResampleTaps random_taps(std::mt19937& rng, std::int64_t window, std::int64_t outputs,
                                  int taps) {
  std::uniform_int_distribution<std::int64_t> pos(0, window - 1);
  std::uniform_real_distribution<double> weight(-1.0, 1.0);
  kernels::ResampleTaps t;
  t.taps = taps;
  for (std::int64_t o = 0; o < outputs; ++o) {
    t.i0.push_back(pos(rng));
    t.i1.push_back(pos(rng));
    t.w0.push_back(weight(rng));
    t.w1.push_back(taps == 2 ? weight(rng) : 0.0);
  }
  return t;
}

}  // namespace

TEST_CASE("gpu kernels: the pool.* slots on CUDA match the CPU kernels", "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  struct Case {
    Shape window;
    std::vector<kernels::PoolTaps> dims;
  };
  const std::vector<Case> cases{
      {{2, 3, 8, 16}, {sliding(8, 2, 2, 0, 1), sliding(16, 2, 2, 0, 1)}},  // a U-Net's
      {{1, 2, 7, 9}, {sliding(7, 3, 1, 0, 1), sliding(9, 3, 1, 0, 1)}},    // overlapping
      {{1, 2, 9, 11}, {sliding(9, 2, 3, 0, 2), sliding(11, 3, 2, 0, 2)}},  // dilated
      {{2, 2, 7, 10}, {sliding(7, 3, 2, 1, 1), sliding(10, 3, 2, 1, 1)}},  // padded
      {{2, 3, 21}, {sliding(21, 4, 3, 2, 1)}},                             // 1-d
      {{1, 2, 5, 6, 7},
       {sliding(5, 2, 2, 0, 1), sliding(6, 3, 2, 1, 1), sliding(7, 2, 1, 1, 2)}}};  // 3-d
  const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;
  std::uint64_t seed = 100;
  for (DType dt : kDTypes)
    for (const Case& k : cases) {
      const Shape out_shape = kernels::pool_output_shape(k.window, k.dims);
      const std::string what = "pool over " + shape_str(k.window) + " ";
      for (bool specials : {false, true}) {
        const Tensor X = grid_values(k.window, dt, seed++, specials);
        kernels::MaxPoolForwardArgs f{X, k.dims, Tensor::empty(out_shape, dt)};
        kernels::MaxPoolForwardArgs fg{gpu(X), k.dims,
                                       Tensor::empty(out_shape, dt, Device::cuda(0))};
        run_kernel(kernels::kMaxPoolForward, cpu, dt, f);
        run_kernel(kernels::kMaxPoolForward, cu, dt, fg);
        check_close(fg.output, f.output, dt, what + "pool.max_forward");

        const Tensor GY = random(out_shape, dt, seed++);
        kernels::MaxPoolBackwardArgs b{X, GY, k.dims, Tensor::empty(k.window, dt)};
        kernels::MaxPoolBackwardArgs bg{gpu(X), gpu(GY), k.dims,
                                        Tensor::empty(k.window, dt, Device::cuda(0))};
        run_kernel(kernels::kMaxPoolBackward, cpu, dt, b);
        run_kernel(kernels::kMaxPoolBackward, cu, dt, bg);
        check_close(bg.grad_window, b.grad_window, dt, what + "pool.max_backward");
      }
      const std::vector<kernels::AvgDivisor> rules{
          {true, std::nullopt}, {false, std::nullopt}, {true, 5}};
      for (const kernels::AvgDivisor& rule : rules) {
        const Tensor X = random(k.window, dt, seed++);
        kernels::AvgPoolForwardArgs f{X, k.dims, rule, Tensor::empty(out_shape, dt)};
        kernels::AvgPoolForwardArgs fg{gpu(X), k.dims, rule,
                                       Tensor::empty(out_shape, dt, Device::cuda(0))};
        run_kernel(kernels::kAvgPoolForward, cpu, dt, f);
        run_kernel(kernels::kAvgPoolForward, cu, dt, fg);
        check_close(fg.output, f.output, dt, what + "pool.avg_forward");

        const Tensor GY = random(out_shape, dt, seed++);
        kernels::AvgPoolBackwardArgs b{GY, k.dims, rule, Tensor::empty(k.window, dt)};
        kernels::AvgPoolBackwardArgs bg{gpu(GY), k.dims, rule,
                                        Tensor::empty(k.window, dt, Device::cuda(0))};
        run_kernel(kernels::kAvgPoolBackward, cpu, dt, b);
        run_kernel(kernels::kAvgPoolBackward, cu, dt, bg);
        check_close(bg.grad_window, b.grad_window, dt, what + "pool.avg_backward");
      }
    }
  cuda::synchronize();
}

TEST_CASE("gpu kernels: the norm.* slots on CUDA match the CPU kernels", "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  struct Case {
    const char* name;
    kernels::NormLayout L;
    bool weight, bias;
  };
  std::vector<Case> cases;
  {
    kernels::NormLayout bn;  // batch_norm: one statistic per channel
    bn.n = 3, bn.c = 5, bn.s = 37;
    cases.push_back({"batch_norm", bn, true, true});
    kernels::NormLayout gn;  // group_norm: 2 groups of 3 channels
    gn.n = 2, gn.c = 6, gn.s = 300, gn.stats_per_sample = 2, gn.group_size = 3;
    cases.push_back({"group_norm", gn, true, false});
    kernels::NormLayout in;  // instance_norm, no affine
    in.n = 2, in.c = 4, in.s = 1000, in.stats_per_sample = 4, in.group_size = 1;
    cases.push_back({"instance_norm", in, false, false});
    kernels::NormLayout ln;  // layer_norm: per-element affine
    ln.n = 4, ln.c = 3, ln.s = 20, ln.stats_per_sample = 1, ln.group_size = 3;
    ln.elementwise_affine = true;
    cases.push_back({"layer_norm", ln, true, true});
  }
  std::uint64_t seed = 1;
  for (DType dt : kDTypes)
    for (const Case& k : cases) {
      const kernels::NormLayout& L = k.L;
      const std::string what = std::string(k.name) + " ";
      const Shape shape{L.n, L.c, L.s};
      // An offset mean: the moments must not be sum(x^2) - n mean^2.
      const Tensor X = random(shape, dt, seed++, 2.0, 5.0), DY = random(shape, dt, seed++);
      const Tensor W = k.weight ? random({L.params()}, dt, seed++, 0.5, 1.5) : Tensor();
      const Tensor B = k.bias ? random({L.params()}, dt, seed++) : Tensor();
      const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;

      Tensor m_cpu = Tensor::empty({L.stats(), 3}, DType::F64);
      Tensor m_gpu = Tensor::empty({L.stats(), 3}, DType::F64);
      run_kernel(kernels::kNormMoments, cpu, dt, {X, L, m_cpu});
      run_kernel(kernels::kNormMoments, cu, dt, {gpu(X), L, m_gpu});
      check_close(m_gpu, m_cpu, dt, what + "norm.moments");

      Tensor mean = Tensor::empty({L.stats()}, DType::F64);
      Tensor invstd = Tensor::empty({L.stats()}, DType::F64);
      Tensor mg = random({L.stats()}, DType::F64, seed++);
      Tensor mgx = random({L.stats()}, DType::F64, seed++);
      for (std::int64_t st = 0; st < L.stats(); ++st) {
        const double* m = m_cpu.data<double>() + 3 * st;
        mean.data<double>()[st] = m[1];
        invstd.data<double>()[st] = 1.0 / std::sqrt(m[2] / m[0] + 1e-5);
      }

      for (bool relu : {false, true}) {
        kernels::NormApplyArgs a{X, L, mean, invstd, W, B, relu, Tensor::empty(shape, dt)};
        kernels::NormApplyArgs b{gpu(X), L,      mean, invstd,
                                 gpu(W), gpu(B), relu, Tensor::empty(shape, dt, Device::cuda(0))};
        run_kernel(kernels::kNormApply, cpu, dt, a);
        run_kernel(kernels::kNormApply, cu, dt, b);
        check_close(b.y, a.y, dt, what + "norm.apply" + (relu ? " relu" : ""));
      }

      // A fused relu's output gating the backward's gradient (values in
      // [-1, 1): about half of them <= 0), or none.
      const Tensor Y0 = random(shape, dt, seed++);
      for (const bool gated : {false, true}) {
        const Tensor G = gated ? Y0 : Tensor();
        Tensor p_cpu = Tensor::empty({L.stats(), 5}, DType::F64);
        Tensor p_gpu = Tensor::empty({L.stats(), 5}, DType::F64);
        run_kernel(kernels::kNormBackwardReduce, cpu, dt, {DY, X, L, W, p_cpu, G});
        run_kernel(kernels::kNormBackwardReduce, cu, dt,
                   {gpu(DY), gpu(X), L, gpu(W), p_gpu, gated ? gpu(G) : Tensor()});
        check_close(p_gpu, p_cpu, dt, what + "norm.backward_reduce" + (gated ? " gated" : ""));

        for (bool batch_stats : {true, false}) {
          const auto args = [&](bool on_gpu) {
            kernels::NormBackwardApplyArgs b;
            b.grad_output = on_gpu ? gpu(DY) : DY;
            b.x = on_gpu ? gpu(X) : X;
            b.layout = L;
            b.mean = mean;
            b.invstd = invstd;
            b.weight = on_gpu ? gpu(W) : W;
            if (batch_stats) {
              b.mean_g = mg;
              b.mean_gxhat = mgx;
            }
            b.grad_input = Tensor::empty(shape, dt, on_gpu ? Device::cuda(0) : Device::cpu());
            const Device where = on_gpu ? Device::cuda(0) : Device::cpu();
            b.grad_weight = Tensor::empty({L.params()}, dt, where);
            b.grad_bias = Tensor::empty({L.params()}, dt, where);
            if (gated) b.relu_output = on_gpu ? gpu(G) : G;
            return b;
          };
          const kernels::NormBackwardApplyArgs c = args(false), g = args(true);
          run_kernel(kernels::kNormBackwardApply, cpu, dt, c);
          run_kernel(kernels::kNormBackwardApply, cu, dt, g);
          const std::string tag =
              what + "norm.backward_apply" + (batch_stats ? "" : " eval") + (gated ? " gated" : "");
          check_close(g.grad_input, c.grad_input, dt, tag + " grad_input");
          check_close(g.grad_weight, c.grad_weight, dt, tag + " grad_weight");
          check_close(g.grad_bias, c.grad_bias, dt, tag + " grad_bias");
        }
      }
    }
  cuda::synchronize();
}

TEST_CASE("gpu kernels: the channel.* slots on CUDA match the CPU kernels",
          "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;
  std::uint64_t seed = 200;
  for (DType dt : kDTypes)
    for (const Shape& shape : {Shape{2, 5, 7, 9}, Shape{3, 4, 1000}, Shape{1, 3, 2, 3, 4}}) {
      const std::string what = "channel over " + shape_str(shape) + " ";
      const Tensor Y = random(shape, dt, seed++), B = random({shape[1]}, dt, seed++);
      Tensor y_cpu = Y.clone(), y_gpu = gpu(Y);
      run_kernel(kernels::kChannelBias, cpu, dt, {y_cpu, B});
      run_kernel(kernels::kChannelBias, cu, dt, {y_gpu, gpu(B)});
      check_close(y_gpu, y_cpu, dt, what + "channel.add_bias");

      Tensor s_cpu = Tensor::empty({shape[1]}, DType::F64);
      Tensor s_gpu = Tensor::empty({shape[1]}, DType::F64);
      run_kernel(kernels::kChannelSums, cpu, dt, {Y, s_cpu});
      run_kernel(kernels::kChannelSums, cu, dt, {gpu(Y), s_gpu});
      check_close(s_gpu, s_cpu, dt, what + "channel.sums");
    }
  cuda::synchronize();
}

TEST_CASE("gpu kernels: the loss.* slots on CUDA match the CPU kernels", "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;
  std::uint64_t seed = 300;
  for (DType dt : kDTypes)
    for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{4, 10, 3000}, Shape{1, 1, 1}}) {
      const std::string what = "loss over " + shape_str(shape) + " ";
      const Tensor X = random(shape, dt, seed++, -3, 3), T = random(shape, dt, seed++, 0, 1);

      Tensor sum_cpu = Tensor::empty({}, DType::F64), sum_gpu = Tensor::empty({}, DType::F64);
      run_kernel(kernels::kMseLoss, cpu, dt, {X, T, sum_cpu});
      run_kernel(kernels::kMseLoss, cu, dt, {gpu(X), gpu(T), sum_gpu});
      check_close(sum_gpu, sum_cpu, dt, what + "loss.mse");

      kernels::MseLossBackwardArgs mb{X, T, 0.25, Tensor::empty(shape, dt)};
      kernels::MseLossBackwardArgs mbg{gpu(X), gpu(T), 0.25,
                                       Tensor::empty(shape, dt, Device::cuda(0))};
      run_kernel(kernels::kMseLossBackward, cpu, dt, mb);
      run_kernel(kernels::kMseLossBackward, cu, dt, mbg);
      check_close(mbg.grad_input, mb.grad_input, dt, what + "loss.mse_backward");

      run_kernel(kernels::kCrossEntropy, cpu, dt, {X, T, sum_cpu});
      run_kernel(kernels::kCrossEntropy, cu, dt, {gpu(X), gpu(T), sum_gpu});
      check_close(sum_gpu, sum_cpu, dt, what + "loss.cross_entropy");

      kernels::CrossEntropyBackwardArgs cb{X, T, 0.5, Tensor::empty(shape, dt)};
      kernels::CrossEntropyBackwardArgs cbg{gpu(X), gpu(T), 0.5,
                                            Tensor::empty(shape, dt, Device::cuda(0))};
      run_kernel(kernels::kCrossEntropyBackward, cpu, dt, cb);
      run_kernel(kernels::kCrossEntropyBackward, cu, dt, cbg);
      check_close(cbg.grad_input, cb.grad_input, dt, what + "loss.cross_entropy_backward");

      using kernels::PointwiseLoss;
      const std::pair<PointwiseLoss, double> losses[] = {{PointwiseLoss::L1, 0},
                                                         {PointwiseLoss::SmoothL1, 0.7},
                                                         {PointwiseLoss::SmoothL1, 0},
                                                         {PointwiseLoss::Huber, 1.3},
                                                         {PointwiseLoss::BceWithLogits, 0}};
      for (const auto& [loss, param] : losses) {
        const std::string name = what + "loss.pointwise " + std::to_string(static_cast<int>(loss));
        run_kernel(kernels::kPointwiseLoss, cpu, dt, {X, T, loss, param, sum_cpu});
        run_kernel(kernels::kPointwiseLoss, cu, dt, {gpu(X), gpu(T), loss, param, sum_gpu});
        check_close(sum_gpu, sum_cpu, dt, name);
        kernels::PointwiseLossBackwardArgs pb{X, T, loss, param, 0.5, Tensor::empty(shape, dt)};
        kernels::PointwiseLossBackwardArgs pbg{
            gpu(X), gpu(T), loss, param, 0.5, Tensor::empty(shape, dt, Device::cuda(0))};
        run_kernel(kernels::kPointwiseLossBackward, cpu, dt, pb);
        run_kernel(kernels::kPointwiseLossBackward, cu, dt, pbg);
        check_close(pbg.grad_input, pb.grad_input, dt, name + " backward");
      }
    }
  cuda::synchronize();
}

TEST_CASE("gpu kernels: the upsample.* slots on CUDA match the CPU kernels",
          "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;
  std::mt19937 rng(7);
  std::uint64_t seed = 400;
  for (DType dt : kDTypes)
    for (int taps : {1, 2})
      for (const Shape& window : {Shape{2, 3, 9}, Shape{1, 2, 5, 6}, Shape{2, 2, 3, 4, 5}}) {
        std::vector<kernels::ResampleTaps> dims;
        for (std::size_t d = 2; d < window.size(); ++d)
          dims.push_back(random_taps(rng, window[d], 2 * window[d] + 1, taps));
        const Shape out_shape = kernels::resample_output_shape(window, dims);
        const std::string what =
            std::string(taps == 1 ? "nearest" : "linear") + " over " + shape_str(window) + " ";
        const Tensor X = random(window, dt, seed++);
        kernels::UpsampleForwardArgs f{X, dims, Tensor::empty(out_shape, dt)};
        kernels::UpsampleForwardArgs fg{gpu(X), dims,
                                        Tensor::empty(out_shape, dt, Device::cuda(0))};
        run_kernel(kernels::kUpsampleForward, cpu, dt, f);
        run_kernel(kernels::kUpsampleForward, cu, dt, fg);
        check_close(fg.output, f.output, dt, what + "upsample.forward");

        const Tensor GY = random(out_shape, dt, seed++);
        kernels::UpsampleBackwardArgs b{GY, dims, Tensor::empty(window, dt)};
        kernels::UpsampleBackwardArgs bg{gpu(GY), dims, Tensor::empty(window, dt, Device::cuda(0))};
        run_kernel(kernels::kUpsampleBackward, cpu, dt, b);
        run_kernel(kernels::kUpsampleBackward, cu, dt, bg);
        check_close(bg.grad_window, b.grad_window, dt, what + "upsample.backward");
      }
  cuda::synchronize();
}

// The window ops run these slots on pieces of a halo window where they lie:
// the window a view into a larger tile, the output a band of a larger
// output, and the backwards adding into a view of the window's gradient that
// already holds other bands' sums. The CUDA kernels take such views as the
// CPU kernels do; the whole parent tensors are compared, so a write outside
// the view fails too.
TEST_CASE("gpu kernels: pool.* and upsample.* read and write views and accumulate",
          "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;
  const Shape window{2, 3, 7, 10}, parent{2, 3, 11, 14};
  // The window at rows 2.., columns 3..: strided in H and W, W's stride 1.
  const auto in_view = [&](const Tensor& t) { return t.narrow(2, 2, 7).narrow(3, 3, 10); };
  // A band of outputs: rows 1.. of a taller tensor.
  const auto out_view = [](const Tensor& t, const Shape& s) { return t.narrow(2, 1, s[2]); };
  const auto taller = [](Shape s) {
    s[2] += 3;
    return s;
  };
  std::uint64_t seed = 900;
  for (DType dt : kDTypes) {
    const std::vector<kernels::PoolTaps> dims{sliding(7, 3, 2, 1, 1), sliding(10, 3, 2, 1, 1)};
    const Shape out = kernels::pool_output_shape(window, dims);
    const Tensor X = grid_values(parent, dt, seed++, false);
    const Tensor Y0 = random(taller(out), dt, seed++), GW0 = random(parent, dt, seed++);
    const Tensor GY = random(taller(out), dt, seed++);
    Tensor y = Y0.clone(), yg = gpu(Y0);
    run_kernel(kernels::kMaxPoolForward, cpu, dt, {in_view(X), dims, out_view(y, out)});
    run_kernel(kernels::kMaxPoolForward, cu, dt, {in_view(gpu(X)), dims, out_view(yg, out)});
    check_close(yg, y, dt, "pool.max_forward on views");
    Tensor gw = GW0.clone(), gwg = gpu(GW0);
    run_kernel(kernels::kMaxPoolBackward, cpu, dt,
               {in_view(X), out_view(GY, out), dims, in_view(gw), true});
    run_kernel(kernels::kMaxPoolBackward, cu, dt,
               {in_view(gpu(X)), out_view(gpu(GY), out), dims, in_view(gwg), true});
    check_close(gwg, gw, dt, "pool.max_backward accumulating into a view");

    const kernels::AvgDivisor rule{false, std::nullopt};
    y = Y0.clone(), yg = gpu(Y0);
    run_kernel(kernels::kAvgPoolForward, cpu, dt, {in_view(X), dims, rule, out_view(y, out)});
    run_kernel(kernels::kAvgPoolForward, cu, dt, {in_view(gpu(X)), dims, rule, out_view(yg, out)});
    check_close(yg, y, dt, "pool.avg_forward on views");
    gw = GW0.clone(), gwg = gpu(GW0);
    run_kernel(kernels::kAvgPoolBackward, cpu, dt,
               {out_view(GY, out), dims, rule, in_view(gw), true});
    run_kernel(kernels::kAvgPoolBackward, cu, dt,
               {out_view(gpu(GY), out), dims, rule, in_view(gwg), true});
    check_close(gwg, gw, dt, "pool.avg_backward accumulating into a view");

    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::vector<kernels::ResampleTaps> up{random_taps(rng, 7, 13, 2),
                                                random_taps(rng, 10, 19, 2)};
    const Shape up_out = kernels::resample_output_shape(window, up);
    const Tensor U0 = random(taller(up_out), dt, seed++), GU = random(taller(up_out), dt, seed++);
    Tensor u = U0.clone(), ug = gpu(U0);
    run_kernel(kernels::kUpsampleForward, cpu, dt, {in_view(X), up, out_view(u, up_out)});
    run_kernel(kernels::kUpsampleForward, cu, dt, {in_view(gpu(X)), up, out_view(ug, up_out)});
    check_close(ug, u, dt, "upsample.forward on views");
    gw = GW0.clone(), gwg = gpu(GW0);
    run_kernel(kernels::kUpsampleBackward, cpu, dt, {out_view(GU, up_out), up, in_view(gw), true});
    run_kernel(kernels::kUpsampleBackward, cu, dt,
               {out_view(gpu(GU), up_out), up, in_view(gwg), true});
    check_close(gwg, gw, dt, "upsample.backward accumulating into a view");
  }
  cuda::synchronize();
}

TEST_CASE("gpu kernels: the optim.* slots on CUDA match the CPU kernels", "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  const Shape shape{3, 1000};  // more elements than one block of threads
  for (DType dt : {DType::F64, DType::F32}) {
    // Three steps of each update with every optional state present, the CPU
    // and the CUDA copies of the state carried along separately.
    const auto state = [&](std::uint64_t seed, double lo = -1) {
      return random(shape, dt, seed, lo, 1);
    };
    {
      Tensor p = state(1), buf = state(2), gp = gpu(p), gbuf = gpu(buf);
      for (int step = 0; step < 3; ++step) {
        const Tensor g = state(10 + static_cast<std::uint64_t>(step));
        kernels::SgdArgs c{p, g, buf, step == 0, 0.1, 0.9, 0.1, 1e-2, step == 2};
        run_kernel(kernels::kSgd, DeviceType::CPU, dt, c);
        kernels::SgdArgs d{gp, gpu(g), gbuf, step == 0, 0.1, 0.9, 0.1, 1e-2, step == 2};
        run_kernel(kernels::kSgd, DeviceType::CUDA, dt, d);
      }
      check_close(gp, p, dt, "sgd param");
      check_close(gbuf, buf, dt, "sgd momentum_buffer");
    }
    for (const bool decoupled : {false, true}) {
      Tensor p = state(3), m = state(4), v = state(5, 0), vmax = state(6, 0);
      Tensor gp = gpu(p), gm = gpu(m), gv = gpu(v), gvmax = gpu(vmax);
      for (int step = 1; step <= 3; ++step) {
        const Tensor g = state(20 + static_cast<std::uint64_t>(step));
        kernels::AdamArgs c{p, g, m, v, vmax, 1e-2, 0.9, 0.999, 1e-8, 1e-2, decoupled, step};
        run_kernel(kernels::kAdam, DeviceType::CPU, dt, c);
        kernels::AdamArgs d{gp,  gpu(g), gm,   gv,   gvmax,     1e-2,
                            0.9, 0.999,  1e-8, 1e-2, decoupled, step};
        run_kernel(kernels::kAdam, DeviceType::CUDA, dt, d);
      }
      check_close(gp, p, dt, "adam param");
      check_close(gvmax, vmax, dt, "adam max_exp_avg_sq");
    }
    {
      Tensor p = state(7), sq = state(8, 0.5), ga = state(9, 0), buf = state(10);
      Tensor gp = gpu(p), gsq = gpu(sq), gga = gpu(ga), gbuf = gpu(buf);
      for (int step = 0; step < 3; ++step) {
        const Tensor g = state(30 + static_cast<std::uint64_t>(step));
        kernels::RmspropArgs c{p, g, sq, ga, buf, 1e-2, 0.99, 1e-8, 1e-2, 0.9};
        run_kernel(kernels::kRmsprop, DeviceType::CPU, dt, c);
        kernels::RmspropArgs d{gp, gpu(g), gsq, gga, gbuf, 1e-2, 0.99, 1e-8, 1e-2, 0.9};
        run_kernel(kernels::kRmsprop, DeviceType::CUDA, dt, d);
      }
      check_close(gp, p, dt, "rmsprop param");
      check_close(gbuf, buf, dt, "rmsprop momentum_buffer");
    }
    for (const double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
      const Tensor x = state(11);
      kernels::NormPartArgs c{x, norm_type, Tensor::zeros({}, DType::F64)};
      run_kernel(kernels::kNormPart, DeviceType::CPU, dt, c);
      kernels::NormPartArgs d{gpu(x), norm_type, Tensor::zeros({}, DType::F64)};
      run_kernel(kernels::kNormPart, DeviceType::CUDA, dt, d);
      check_close(d.result, c.result, dt, "norm_part p=" + std::to_string(norm_type));
    }
    {
      Tensor x = state(12), gx = gpu(x);
      run_kernel(kernels::kScaleInPlace, DeviceType::CPU, dt, kernels::ScaleInPlaceArgs{x, 0.3});
      run_kernel(kernels::kScaleInPlace, DeviceType::CUDA, dt, kernels::ScaleInPlaceArgs{gx, 0.3});
      check_close(gx, x, dt, "scale_in_place");
    }
  }
}

TEST_CASE("gpu kernels: cross_entropy with class indices on CUDA matches the CPU kernels",
          "[cuda][gpu][kernels]") {
  if (!gpu_or_skip()) return;
  const DeviceType cpu = DeviceType::CPU, cu = DeviceType::CUDA;
  const Shape shape{3, 5, 7, 4};  // N, C, spatial
  // Indices in range, ignore_index (-100 and 2) and two out of range.
  Tensor target = Tensor::empty({3, 7, 4}, DType::I64);
  std::int64_t* t = target.data<std::int64_t>();
  for (std::int64_t i = 0; i < target.numel(); ++i)
    t[i] = i % 11 == 3 ? -100 : (i % 13 == 5 ? 9 : (i % 17 == 2 ? -4 : i % 5));
  for (DType dt : kDTypes)
    for (const double smoothing : {0.0, 0.2})
      for (const std::int64_t ignore : {std::int64_t{-100}, std::int64_t{2}}) {
        const std::string what = std::string("ignore ") + std::to_string(ignore) + " smoothing " +
                                 std::to_string(smoothing) + " ";
        const Tensor X = random(shape, dt, 900, -3, 3);
        Tensor sum_cpu = Tensor::empty({}, DType::F64), sum_gpu = Tensor::empty({}, DType::F64);
        run_kernel(kernels::kCrossEntropyIndices, cpu, dt, {X, target, ignore, smoothing, sum_cpu});
        run_kernel(kernels::kCrossEntropyIndices, cu, dt,
                   {gpu(X), gpu(target), ignore, smoothing, sum_gpu});
        check_close(sum_gpu, sum_cpu, dt, what + "loss.cross_entropy_indices");
        kernels::CrossEntropyIndicesBackwardArgs b{X,         target, ignore,
                                                   smoothing, 0.5,    Tensor::empty(shape, dt)};
        kernels::CrossEntropyIndicesBackwardArgs bg{
            gpu(X), gpu(target), ignore, smoothing, 0.5, Tensor::empty(shape, dt, Device::cuda(0))};
        run_kernel(kernels::kCrossEntropyIndicesBackward, cpu, dt, b);
        run_kernel(kernels::kCrossEntropyIndicesBackward, cu, dt, bg);
        check_close(bg.grad_input, b.grad_input, dt, what + "loss.cross_entropy_indices_backward");
        Tensor counts_cpu = Tensor::empty({4}, DType::F64),
               counts_gpu = Tensor::empty({4}, DType::F64);
        run_kernel(kernels::kClassIndexCount, cpu, DType::I64, {target, 5, ignore, counts_cpu});
        run_kernel(kernels::kClassIndexCount, cu, DType::I64, {gpu(target), 5, ignore, counts_gpu});
        CHECK(max_abs_diff(counts_gpu, counts_cpu) == 0.0);
      }
  cuda::synchronize();
}
