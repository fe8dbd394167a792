// dropout: the mask is a function of (seed, stream, global index) only, so
// every mesh and placement (1 rank, 2, 3, 2x2; sharded along any dim, uneven
// and empty shards, nested shards, Partial) gives the output the whole
// tensor gets from the documented formula, evaluated here on its own; the
// gradient is the same mask on grad_output; manual_seed's streams; p = 0, p =
// 1 and the refusals of a bad p on every rank; the kept fraction.
#include <fmt/format.h>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/dropout.h"
#include "dtensor/ops/pointwise.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace dtensor::nn_test;

namespace {

// The mask as docs/operators.md defines it (splitmix64), written out here.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
bool kept(std::uint64_t seed, std::uint64_t stream, std::uint64_t i, double p) {
  const std::uint64_t golden = 0x9E3779B97F4A7C15ull;
  const std::uint64_t key = mix(seed ^ mix(stream + golden));
  const double u = static_cast<double>(mix(key + (i + 1) * golden) >> 11) / 9007199254740992.0;
  return u >= p;
}

// x * mask / (1 - p) over the whole tensor, in f64.
Tensor oracle(const Tensor& X, double p, std::uint64_t seed, std::uint64_t stream) {
  Tensor Y = X.to(DType::F64).clone();
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  for (std::int64_t i = 0; i < Y.numel(); ++i)
    Y.data<double>()[i] =
        kept(seed, stream, static_cast<std::uint64_t>(i), p) ? Y.data<double>()[i] * scale : 0.0;
  return Y;
}

void check_random_cases(const Shape& mesh_shape, DType dtype, int configs, std::uint64_t salt) {
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  Rng rng(salt);
  for (int k = 0; k < configs; ++k) {
    const std::int64_t ndim = uni(rng, 1, 4);
    Shape shape;
    for (std::int64_t d = 0; d < ndim; ++d)
      shape.push_back(uni(rng, 0, 15) == 0 ? 0 : uni(rng, 1, ndim <= 2 ? 11 : 5));
    std::vector<std::int64_t> dims;
    for (std::int64_t d = 0; d < ndim; ++d)
      dims.push_back(d);
    const Placements px = random_placements(rng, mesh_shape, dims, 75, 10, uni(rng, 0, 3) == 0);
    const double ps[] = {0.5, 0.1, 0.9, 0.0, 1.0};
    const double p = ps[uni(rng, 0, 4)];
    const std::uint64_t seed = rng(), stream = static_cast<std::uint64_t>(uni(rng, 0, 1000));
    INFO(fmt::format("shape {} placements {} p {} seed {} stream {}", shape_str(shape),
                     placements_str(px), p, seed, stream));
    const Tensor X = Tensor::rand(shape, DType::F64, rng()).to(dtype);
    const Tensor G = Tensor::rand(shape, DType::F64, rng()).to(dtype);
    const double tol = dtype == DType::F64 ? 1e-15 : dtype == DType::F32 ? 1e-6 : 1e-2;
    const DTensor y = dropout(distribute_tensor(X, mesh, px), p, seed, stream);
    // (An empty tensor may take any placement: every strategy is free.)
    for (std::size_t m = 0; m < mesh_shape.size() && X.numel() > 0; ++m)
      CHECK(y.placements()[m] == px[m]);
    require_close(y.full_tensor(), oracle(X, p, seed, stream), tol, "output");
    // The gradient: the same mask, wherever grad_output is placed.
    const Placements pg = random_placements(rng, mesh_shape, dims, 75, 0, false);
    const DTensor g = dropout_backward(distribute_tensor(G, mesh, pg), p, seed, stream);
    require_close(g.full_tensor(), oracle(G, p, seed, stream), tol, "grad_input");
  }
}

void check_generator_and_autograd(const Shape& mesh_shape) {
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Shape shape{7, 5, 3};
  Placements p(mesh_shape.size(), Replicate());
  p[0] = Shard(0);
  if (p.size() > 1) p[1] = Shard(2);
  const Tensor X = Tensor::rand(shape, DType::F64, 3);
  const DTensor x = distribute_tensor(X, mesh, p);

  manual_seed(1234);
  const DTensor a = dropout(x, 0.4);
  const DTensor b = dropout(x, 0.4);
  require_close(a.full_tensor(), oracle(X, 0.4, 1234, 0), 1e-15, "first call");
  require_close(b.full_tensor(), oracle(X, 0.4, 1234, 1), 1e-15, "second call");
  CHECK(dropout_generator_state().stream == 2);
  // Evaluation mode: the input itself, no stream taken.
  const DTensor e = dropout(x, 0.4, false);
  require_close(e.full_tensor(), X, 0, "eval");
  CHECK(dropout_generator_state().stream == 2);
  manual_seed(1234);
  require_close(dropout(x, 0.4).full_tensor(), a.full_tensor(), 0, "reseeded");

  // Autograd: the input's gradient is grad * mask / (1 - p).
  manual_seed(99);
  DTensor xi = distribute_tensor(X, mesh, p);
  xi.requires_grad_();
  const Tensor R = Tensor::rand(shape, DType::F64, 4);
  const DTensor r = distribute_tensor(R, mesh, p);
  backward(sum(mul(dropout(xi, 0.25), r)));
  REQUIRE(xi.grad().has_value());
  CHECK(xi.grad()->placements() == p);
  require_close(xi.grad()->full_tensor(), oracle(R, 0.25, 99, 0), 1e-15, "autograd");
}

DTENSOR_TEST_REGISTRAR {
  struct Batch {
    Shape mesh;
    DType dtype;
    int configs;
  };
  for (const Batch& b :
       {Batch{{1}, DType::F64, 20}, Batch{{2}, DType::F64, 25}, Batch{{3}, DType::F64, 20},
        Batch{{2, 2}, DType::F64, 25}, Batch{{2}, DType::F32, 10}, Batch{{2}, DType::BF16, 6}}) {
    const std::string name = fmt::format("nn dropout mesh-independent mask {} mesh {} ({} configs)",
                                         dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[nn][dropout][mp]", [=] {
      run_ranks(static_cast<int>(shape_numel(b.mesh)), [=](RankContext&) {
        check_random_cases(b.mesh, b.dtype, b.configs, std::hash<std::string>()(name));
      });
    });
  }
  for (const Shape& mesh : {Shape{1}, Shape{2}, Shape{2, 2}})
    register_test(
        fmt::format("nn dropout manual_seed streams and autograd mesh {}", mesh_str(mesh)),
        "[nn][dropout][mp]", [=] {
          run_ranks(static_cast<int>(shape_numel(mesh)),
                    [=](RankContext&) { check_generator_and_autograd(mesh); });
        });

  register_test("nn dropout: p bounds, p = 0 and 1, the kept fraction", "[nn][dropout][mp]", [] {
    run_ranks(2, [](RankContext&) {
      DeviceMesh mesh(DeviceType::CPU, {2});
      // In [1, 3): no zeros, so a zero in the output is a dropped element.
      const Tensor X =
          Tensor::rand({100, 101}, DType::F64, 5).add_(Tensor::full({100, 101}, 2.0, DType::F64));
      const DTensor x = distribute_tensor(X, mesh, {Shard(1)});
      for (double bad : {-0.1, 1.5, std::nan("")})
        CHECK_THROWS_WITH(dropout(x, bad), Catch::Contains("p:"));
      CHECK_THROWS_WITH(dropout(x, 2.0, 1, 0), Catch::Contains("p:"));
      require_close(dropout(x, 0.0, 7, 0).full_tensor(), X, 0, "p = 0");
      require_close(dropout(x, 1.0, 7, 0).full_tensor(), Tensor::zeros({100, 101}, DType::F64), 0,
                    "p = 1");
      for (double p : {0.1, 0.5, 0.8}) {
        const Tensor y = dropout(x, p, 11, 3).full_tensor();
        std::int64_t nonzero = 0;
        for (std::int64_t i = 0; i < y.numel(); ++i)
          nonzero += y.data<double>()[i] != 0;
        const double fraction = static_cast<double>(nonzero) / static_cast<double>(y.numel());
        INFO("p " << p << " kept " << fraction);
        // 10100 Bernoulli draws: 5 standard deviations are below 0.025.
        CHECK(std::abs(fraction - (1 - p)) < 0.025);
      }
    });
  });
}

}  // namespace
