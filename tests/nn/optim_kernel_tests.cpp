// The CPU kernels of dtensor/ops/kernels/optim.h against naive f64 loops
// written here from torch.optim's documented algorithms: SGD (momentum,
// first step, dampening, nesterov, weight decay), Adam and AdamW (amsgrad),
// RMSprop (centered, momentum, weight decay), the norm parts (2, 3,
// infinity) and the in-place scale; f64 to 1e-14, f32 against f64 loops on
// the same f32 inputs to 1e-5, over a length that is no multiple of a
// vector width.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernels/optim.h"

using namespace dtensor;

namespace {

constexpr std::int64_t kN = 1037;

struct Data {
  DType dtype;
  Tensor make(std::uint64_t seed, double scale = 1.0, double shift = 0.0) const {
    Tensor t = Tensor::rand({kN}, DType::F64, seed);
    for (std::int64_t i = 0; i < kN; ++i)
      t.data<double>()[i] = t.data<double>()[i] * scale + shift;
    return t.to(dtype);
  }
  double tol() const { return dtype == DType::F64 ? 1e-14 : 1e-5; }
};

std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out.push_back(t.item_flat(i));
  return out;
}

void check_close(const Tensor& got, const std::vector<double>& want, double tol, const char* what) {
  INFO(what);
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double w = want[static_cast<std::size_t>(i)];
    if (std::abs(got.item_flat(i) - w) > tol * std::max(1.0, std::abs(w))) {
      FAIL_CHECK(what << "[" << i << "]: " << got.item_flat(i) << " vs " << w);
      return;
    }
  }
}

}  // namespace

TEST_CASE("optim kernels: SGD against a naive loop", "[optim_kernels]") {
  for (DType dt : {DType::F64, DType::F32})
    for (int variant = 0; variant < 4; ++variant) {
      INFO(dtype_name(dt) << " variant " << variant);
      const Data d{dt};
      kernels::SgdArgs a;
      a.param = d.make(1, 2, -1);
      a.grad = d.make(2, 2, -1);
      a.lr = 0.1;
      a.weight_decay = variant == 0 ? 0 : 0.01;
      a.momentum = variant == 0 ? 0 : 0.9;
      a.dampening = variant == 2 ? 0.3 : 0;
      a.nesterov = variant == 3;
      a.fresh_buffer = variant == 1;
      if (variant > 0) a.momentum_buffer = d.make(3);
      auto p = values(a.param), g = values(a.grad);
      auto buf = a.momentum_buffer ? values(*a.momentum_buffer) : std::vector<double>{};
      run_kernel(kernels::kSgd, DeviceType::CPU, dt, a);
      for (std::size_t i = 0; i < p.size(); ++i) {
        double gi = g[i] + a.weight_decay * p[i];
        if (variant > 0) {
          buf[i] = a.fresh_buffer ? gi : a.momentum * buf[i] + (1 - a.dampening) * gi;
          gi = a.nesterov ? gi + a.momentum * buf[i] : buf[i];
        }
        p[i] -= a.lr * gi;
      }
      check_close(a.param, p, d.tol(), "param");
      if (variant > 0) check_close(*a.momentum_buffer, buf, d.tol(), "momentum_buffer");
    }
}

TEST_CASE("optim kernels: Adam, AdamW and amsgrad against a naive loop", "[optim_kernels]") {
  for (DType dt : {DType::F64, DType::F32})
    for (const bool decoupled : {false, true})
      for (const bool amsgrad : {false, true}) {
        INFO(dtype_name(dt) << " decoupled " << decoupled << " amsgrad " << amsgrad);
        const Data d{dt};
        kernels::AdamArgs a;
        a.param = d.make(1, 2, -1);
        a.grad = d.make(2, 2, -1);
        a.exp_avg = d.make(3, 0.1);
        a.exp_avg_sq = d.make(4, 0.01);
        // Half the maxima above exp_avg_sq's update, half below.
        if (amsgrad) a.max_exp_avg_sq = d.make(5, 0.02);
        a.lr = 0.01;
        a.weight_decay = 0.1;
        a.decoupled_weight_decay = decoupled;
        a.step = 3;
        auto p = values(a.param), g = values(a.grad), m = values(a.exp_avg),
             v = values(a.exp_avg_sq);
        auto vmax = amsgrad ? values(*a.max_exp_avg_sq) : std::vector<double>{};
        run_kernel(kernels::kAdam, DeviceType::CPU, dt, a);
        for (std::size_t i = 0; i < p.size(); ++i) {
          double gi = g[i];
          if (decoupled)
            p[i] *= 1 - a.lr * a.weight_decay;
          else
            gi += a.weight_decay * p[i];
          m[i] = a.beta1 * m[i] + (1 - a.beta1) * gi;
          v[i] = a.beta2 * v[i] + (1 - a.beta2) * gi * gi;
          double second = v[i];
          if (amsgrad) second = vmax[i] = std::max(vmax[i], v[i]);
          const double mhat = m[i] / (1 - std::pow(a.beta1, 3));
          const double vhat = second / (1 - std::pow(a.beta2, 3));
          p[i] -= a.lr * mhat / (std::sqrt(vhat) + a.eps);
        }
        check_close(a.param, p, d.tol(), "param");
        check_close(a.exp_avg, m, d.tol(), "exp_avg");
        check_close(a.exp_avg_sq, v, d.tol(), "exp_avg_sq");
        if (amsgrad) check_close(*a.max_exp_avg_sq, vmax, d.tol(), "max_exp_avg_sq");
      }
}

TEST_CASE("optim kernels: RMSprop against a naive loop", "[optim_kernels]") {
  for (DType dt : {DType::F64, DType::F32})
    for (const bool centered : {false, true})
      for (const bool momentum : {false, true}) {
        INFO(dtype_name(dt) << " centered " << centered << " momentum " << momentum);
        const Data d{dt};
        kernels::RmspropArgs a;
        a.param = d.make(1, 2, -1);
        a.grad = d.make(2, 2, -1);
        a.square_avg = d.make(3, 0.1, 0.5);  // above grad_avg^2: a real variance
        if (centered) a.grad_avg = d.make(4, 0.2, -0.1);
        if (momentum) a.momentum_buffer = d.make(5, 0.1);
        a.lr = 0.01;
        a.weight_decay = 0.05;
        a.momentum = momentum ? 0.9 : 0;
        auto p = values(a.param), g = values(a.grad), sq = values(a.square_avg);
        auto ga = centered ? values(*a.grad_avg) : std::vector<double>{};
        auto buf = momentum ? values(*a.momentum_buffer) : std::vector<double>{};
        run_kernel(kernels::kRmsprop, DeviceType::CPU, dt, a);
        for (std::size_t i = 0; i < p.size(); ++i) {
          const double gi = g[i] + a.weight_decay * p[i];
          sq[i] = a.alpha * sq[i] + (1 - a.alpha) * gi * gi;
          double var = sq[i];
          if (centered) {
            ga[i] = a.alpha * ga[i] + (1 - a.alpha) * gi;
            var -= ga[i] * ga[i];
          }
          const double avg = std::sqrt(var) + a.eps;
          if (momentum) {
            buf[i] = a.momentum * buf[i] + gi / avg;
            p[i] -= a.lr * buf[i];
          } else {
            p[i] -= a.lr * gi / avg;
          }
        }
        check_close(a.param, p, d.tol(), "param");
        check_close(a.square_avg, sq, d.tol(), "square_avg");
        if (centered) check_close(*a.grad_avg, ga, d.tol(), "grad_avg");
        if (momentum) check_close(*a.momentum_buffer, buf, d.tol(), "momentum_buffer");
      }
}

TEST_CASE("optim kernels: norm parts and the in-place scale", "[optim_kernels]") {
  for (DType dt : {DType::F64, DType::F32}) {
    const Data d{dt};
    const Tensor x = d.make(1, 2, -1);
    const auto xs = values(x);
    for (double p : {2.0, 3.0, std::numeric_limits<double>::infinity()}) {
      INFO(dtype_name(dt) << " p " << p);
      kernels::NormPartArgs a;
      a.input = x;
      a.norm_type = p;
      a.result = Tensor::zeros({}, DType::F64);
      run_kernel(kernels::kNormPart, DeviceType::CPU, dt, a);
      double want = 0;
      for (double v : xs)
        want = std::isinf(p) ? std::max(want, std::abs(v)) : want + std::pow(std::abs(v), p);
      CHECK(std::abs(a.result.item_flat(0) - want) <= d.tol() * want);
    }
    kernels::NormPartArgs empty{Tensor::zeros({0}, dt), 2.0, Tensor::zeros({}, DType::F64)};
    run_kernel(kernels::kNormPart, DeviceType::CPU, dt, empty);
    CHECK(empty.result.item_flat(0) == 0);
    kernels::ScaleInPlaceArgs s{x.clone(), 0.25};
    run_kernel(kernels::kScaleInPlace, DeviceType::CPU, dt, s);
    std::vector<double> want;
    for (double v : xs)
      want.push_back(v * 0.25);
    check_close(s.tensor, want, 0, "scaled");  // a power of two: exact in both types
  }
}

TEST_CASE("optim kernels: a state tensor of another shape is an internal error",
          "[optim_kernels]") {
  kernels::SgdArgs a;
  a.param = Tensor::zeros({4}, DType::F64);
  a.grad = Tensor::zeros({5}, DType::F64);
  CHECK_THROWS_WITH(run_kernel(kernels::kSgd, DeviceType::CPU, DType::F64, a),
                    Catch::Contains("grad is [5]"));
}
