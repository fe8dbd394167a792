// leaky_relu, gelu (none, tanh), silu, sigmoid and tanh, forward and
// backward, against f64 formulas written here, over seeded random shapes and
// placements (every dim sharded, uneven and empty shards, nested sharding,
// Partial inputs reduced first, a Partial grad_output passing through) on
// meshes 2, 3, 4 and 2x2; f32, bf16 and f16 within their rounding.
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/activations.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

enum class Act { LeakyRelu, Gelu, GeluTanh, Silu, Sigmoid, Tanh };
constexpr Act kActs[] = {Act::LeakyRelu, Act::Gelu,    Act::GeluTanh,
                         Act::Silu,      Act::Sigmoid, Act::Tanh};
const char* act_name(Act a) {
  static const char* kNames[] = {"leaky_relu", "gelu", "gelu(tanh)", "silu", "sigmoid", "tanh"};
  return kNames[static_cast<int>(a)];
}

double sig(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

double ref_f(Act a, double x, double slope) {
  const double k = std::sqrt(2.0 / M_PI);
  switch (a) {
    case Act::LeakyRelu:
      return x > 0 ? x : slope * x;
    case Act::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Act::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    case Act::Silu:
      return x * sig(x);
    case Act::Sigmoid:
      return sig(x);
    case Act::Tanh:
      return std::tanh(x);
  }
  return 0;
}

// d f / d x, differentiated by hand.
double ref_df(Act a, double x, double slope) {
  const double k = std::sqrt(2.0 / M_PI);
  switch (a) {
    case Act::LeakyRelu:
      return x > 0 ? 1.0 : slope;
    case Act::Gelu:
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    case Act::GeluTanh: {
      const double u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case Act::Silu:
      return sig(x) + x * sig(x) * (1.0 - sig(x));
    case Act::Sigmoid:
      return sig(x) * (1.0 - sig(x));
    case Act::Tanh:
      return 1.0 - std::tanh(x) * std::tanh(x);
  }
  return 0;
}

DTensor run_f(Act a, const DTensor& x, double slope) {
  switch (a) {
    case Act::LeakyRelu:
      return leaky_relu(x, slope);
    case Act::Gelu:
      return gelu(x);
    case Act::GeluTanh:
      return gelu(x, GeluApproximate::Tanh);
    case Act::Silu:
      return silu(x);
    case Act::Sigmoid:
      return sigmoid(x);
    case Act::Tanh:
      return dtensor::tanh(x);
  }
  return x;
}

DTensor run_df(Act a, const DTensor& g, const DTensor& x, double slope) {
  switch (a) {
    case Act::LeakyRelu:
      return leaky_relu_backward(g, x, slope);
    case Act::Gelu:
      return gelu_backward(g, x);
    case Act::GeluTanh:
      return gelu_backward(g, x, GeluApproximate::Tanh);
    case Act::Silu:
      return silu_backward(g, x);
    case Act::Sigmoid:
      return sigmoid_backward(g, x);
    case Act::Tanh:
      return tanh_backward(g, x);
  }
  return x;
}

struct Case {
  Shape shape;
  Placements px, pg;
  double slope = 0.01;
  std::uint64_t seed = 0;
  std::string str() const {
    return fmt::format("shape {} input {} grad {} slope {} seed {}", shape_str(shape),
                       placements_str(px), placements_str(pg), slope, seed);
  }
};

Case random_case(Rng& rng, const Shape& mesh) {
  Case c;
  c.seed = rng();
  const std::int64_t ndim = uni(rng, 1, 4);
  for (std::int64_t d = 0; d < ndim; ++d)
    c.shape.push_back(uni(rng, 0, 12) == 0 ? 0 : uni(rng, 1, ndim <= 2 ? 9 : 4));
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < ndim; ++d)
    dims.push_back(d);
  c.px = random_placements(rng, mesh, dims, 75, 12, uni(rng, 0, 3) == 0);
  c.pg = uni(rng, 0, 1) ? c.px : random_placements(rng, mesh, dims, 60, 20, false);
  static const double kSlopes[] = {0.01, 0.2, -0.5, 1.5, 0.0};
  c.slope = kSlopes[uni(rng, 0, 4)];
  return c;
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str());
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  // Values in [-4, 4): the curved parts and both tails.
  Tensor X = Tensor::rand(c.shape, DType::F64, c.seed);
  for (std::int64_t i = 0; i < X.numel(); ++i)
    X.data<double>()[i] *= 4;
  X = X.to(dtype);
  const Tensor X64 = X.to(DType::F64);
  const Tensor GY = Tensor::rand(c.shape, dtype, c.seed + 1);
  const Tensor GY64 = GY.to(DType::F64);
  const double tol = dtype == DType::F64 ? 1e-12 : dtype == DType::F32 ? 1e-5 : 2e-2;
  const DTensor x = distribute_tensor(X, mesh, c.px);
  const DTensor gy = distribute_tensor(GY, mesh, c.pg);
  for (Act a : kActs) {
    INFO(act_name(a));
    Tensor Y = Tensor::zeros(c.shape, DType::F64), GX = Tensor::zeros(c.shape, DType::F64);
    for (std::int64_t i = 0; i < X.numel(); ++i) {
      const double v = X64.data<double>()[i];
      Y.data<double>()[i] = ref_f(a, v, c.slope);
      GX.data<double>()[i] = GY64.data<double>()[i] * ref_df(a, v, c.slope);
    }
    const DTensor y = run_f(a, x, c.slope);
    CHECK(!y.spec().has_partial());
    require_close(y.full_tensor(), Y, tol, "output");
    const DTensor gx = run_df(a, gy, x, c.slope);
    require_close(gx.full_tensor(), GX, tol * 2, "grad_input");
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
        Batch{{2, 2}, DType::F64, 25}, Batch{{2}, DType::F32, 10}, Batch{{2}, DType::BF16, 10},
        Batch{{3}, DType::F16, 10}}) {
    const std::string name = fmt::format("nn activations differential {} mesh {} ({} configs)",
                                         dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[nn][activation][mp]", [=] {
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

  register_test("nn activations: placements pass through - Partial reduced - errors",
                "[nn][activation][mp]", [] {
                  run_ranks(2, [](RankContext&) {
                    DeviceMesh mesh(DeviceType::CPU, {2});
                    const DTensor x =
                        distribute_tensor(Tensor::rand({5, 3}, DType::F32, 1), mesh, {Shard(1)});
                    CHECK(gelu(x).placements() == Placements{Shard(1)});
                    const DTensor p =
                        distribute_tensor(Tensor::rand({5, 3}, DType::F32, 1), mesh, {Partial()});
                    CHECK(!silu(p).spec().has_partial());
                    const DTensor r =
                        distribute_tensor(Tensor::rand({5, 3}, DType::F32, 1), mesh, {Replicate()});
                    CHECK(tanh_backward(p, r).placements() == Placements{Partial()});
                    const DTensor other =
                        distribute_tensor(Tensor::rand({5, 4}, DType::F32, 1), mesh, {Replicate()});
                    CHECK_THROWS_WITH(sigmoid_backward(other, r), Catch::Contains("shape"));
                  });
                });

  // The f32 kernels evaluate e^x themselves (sigmoid, silu, tanh's
  // backward): every range of it, to a few ulp of the f64 formula, with the
  // special values PyTorch gives.
  register_test(
      "nn activations f32: sigmoid, silu and tanh backward over the whole range, infinities, NaN",
      "[nn][activation][mp]", [] {
        run_ranks(2, [](RankContext&) {
          DeviceMesh mesh(DeviceType::CPU, {2});
          std::vector<float> v;
          for (float x = -120.0f; x <= 120.0f; x += 0.0137f)
            v.push_back(x);
          for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.5f, -87.5f, 88.7f, 88.8f, -103.9f,
                          -104.5f, -150.0f, 1e30f, -1e30f})
            v.push_back(x);
          v.push_back(std::numeric_limits<float>::infinity());
          v.push_back(-std::numeric_limits<float>::infinity());
          v.push_back(std::numeric_limits<float>::quiet_NaN());
          const auto n = static_cast<std::int64_t>(v.size());
          Tensor X = Tensor::empty({n}, DType::F32);
          std::copy(v.begin(), v.end(), X.data<float>());
          const Tensor G = Tensor::full({n}, 1.0, DType::F32);
          const DTensor x = distribute_tensor(X, mesh, {Shard(0)});
          const DTensor g = distribute_tensor(G, mesh, {Shard(0)});
          for (Act a : {Act::Sigmoid, Act::Silu, Act::Tanh}) {
            INFO(act_name(a));
            const Tensor y = run_f(a, x, 0).full_tensor();
            const Tensor dy = run_df(a, g, x, 0).full_tensor();
            for (std::int64_t i = 0; i < n; ++i) {
              const double xi = v[static_cast<std::size_t>(i)];
              INFO("x = " << xi);
              // The output to 4 ulp of a normal f32 (or of the smallest
              // denormal); the derivative to 4 ulp of 1, as the formula
              // s (1 - s) leaves it in f32 (PyTorch's too: 0 past x = 17).
              const auto close = [](double got, double want, double scale) {
                if (std::isnan(want)) return std::isnan(got);
                if (std::isinf(want)) return got == want;
                return std::abs(got - want) <= std::max(4.8e-7 * scale, 6e-45);
              };
              // Where e^-x overflows f32, 1 / (1 + e^-x) is 0, as PyTorch's
              // sigmoid(-89) is, not the denormal the f64 formula gives.
              const double want =
                  std::isfinite(xi) && -xi > std::log(std::numeric_limits<float>::max())
                      ? 0.0
                      : ref_f(a, xi, 0);
              const double yi = y.data<float>()[i];
              if (a != Act::Tanh) CHECK(close(yi, want, std::abs(want)));  // tanh: oneDNN
              const double di = dy.data<float>()[i], dwant = ref_df(a, xi, 0);
              CHECK(close(di, dwant, std::max({1.0, std::abs(xi), std::abs(dwant)})));
            }
          }
        });
      });
}

}  // namespace
