// Every built-in operator's recorded gradient against central finite
// differences in f64: L = sum(op(inputs) * R) for a fixed random R, each
// input sharded (or replicated, like a parameter), on 2 ranks and on a 2x2
// mesh. The finite differences run the forward alone (no autograd), so the
// oracle shares nothing with the backward formulas under test.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <functional>
#include <random>

#include "dtensor/dtensor.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

using Inputs = std::vector<DTensor>;
using Forward = std::function<DTensor(const Inputs&)>;

struct Arg {
  Shape shape;
  Placements placements;
};

Placements all_replicated(const DeviceMesh& mesh) {
  return Placements(static_cast<std::size_t>(mesh.ndim()), Replicate());
}

double loss_value(const Forward& f, const std::vector<Tensor>& globals,
                  const std::vector<Arg>& args, const Tensor& R, const DeviceMesh& mesh) {
  NoGradGuard no_grad;
  Inputs xs;
  for (std::size_t i = 0; i < args.size(); ++i)
    xs.push_back(distribute_tensor(globals[i], mesh, args[i].placements));
  const DTensor y = f(xs);
  const DTensor r = distribute_tensor(R, mesh, all_replicated(mesh)).redistribute(mesh, [&] {
    Placements p = y.placements();
    for (auto& q : p)
      if (q.is_partial()) q = Replicate();
    return p;
  }());
  return sum(mul(y, r)).full_tensor().item_flat(0);
}

// Checks the gradient of every input at `probes` random elements.
void gradcheck(const std::string& what, const DeviceMesh& mesh, const std::vector<Arg>& args,
               const Forward& f, std::uint64_t seed, int probes = 4) {
  INFO(what);
  std::vector<Tensor> globals;
  for (std::size_t i = 0; i < args.size(); ++i)
    globals.push_back(Tensor::rand(args[i].shape, DType::F64, seed + i)
                          .add_(Tensor::full(args[i].shape, -0.5, DType::F64)));
  Inputs xs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    xs.push_back(distribute_tensor(globals[i], mesh, args[i].placements));
    xs.back().requires_grad_();
  }
  const DTensor y = f(xs);
  REQUIRE(y.requires_grad());
  const Tensor R = Tensor::rand(y.shape(), DType::F64, seed + 100);
  Placements rp = y.placements();
  for (auto& q : rp)
    if (q.is_partial()) q = Replicate();
  const DTensor r = distribute_tensor(R, mesh, rp);
  backward(sum(mul(y, r)));

  std::mt19937_64 rng(seed);
  const double eps = 1e-6;
  for (std::size_t i = 0; i < args.size(); ++i) {
    REQUIRE(xs[i].grad().has_value());
    REQUIRE(xs[i].grad()->spec() == xs[i].spec());  // placed like its tensor
    const Tensor g = xs[i].grad()->full_tensor();
    for (int p = 0; p < probes; ++p) {
      const auto n = shape_numel(args[i].shape);
      const std::int64_t k = std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
      auto shifted = [&](double d) {
        std::vector<Tensor> gs = globals;
        gs[i] = globals[i].clone();
        gs[i].data<double>()[k] += d;
        return loss_value(f, gs, args, R, mesh);
      };
      const double fd = (shifted(eps) - shifted(-eps)) / (2 * eps);
      const double got = g.item_flat(k);
      INFO(fmt::format("input {} element {}: autograd {} finite difference {}", i, k, got, fd));
      CHECK(std::abs(got - fd) <= 1e-5 * (1 + std::abs(fd)));
    }
  }
}

// The cases, for a mesh whose dim 0 shards H (and dim 1, if any, W).
void check_every_op(const DeviceMesh& mesh) {
  const bool two = mesh.ndim() == 2;
  const Placements S = two ? Placements{Shard(2), Shard(3)} : Placements{Shard(2)};
  const Placements R = all_replicated(mesh);
  const Placements Sb = two ? Placements{Shard(0), Shard(2)} : Placements{Shard(0)};
  const Shape x = {2, 4, 7, 6};
  std::uint64_t seed = 1;
  auto check = [&](const std::string& name, std::vector<Arg> args, Forward f) {
    gradcheck(name, mesh, args, f, seed += 17);
  };
  ConvParams cp;
  cp.padding = {{1, 1}};
  check("convolution", {{x, S}, {{3, 4, 3, 3}, R}, {{3}, R}},
        [&](const Inputs& v) { return convolution(v[0], v[1], v[2], cp); });
  ConvParams reflect = cp;
  reflect.padding_mode = PaddingMode::Reflect;
  reflect.stride = {2};
  check("convolution reflect stride 2", {{x, S}, {{3, 4, 3, 3}, R}},
        [&](const Inputs& v) { return convolution(v[0], v[1], std::nullopt, reflect); });
  ConvTransposeParams tp;
  tp.stride = {2};
  check("conv_transpose", {{x, S}, {{4, 3, 2, 2}, R}, {{3}, R}},
        [&](const Inputs& v) { return conv_transpose(v[0], v[1], v[2], tp); });
  PoolParams pool;
  pool.kernel = {2};
  check("max_pool", {{x, S}}, [&](const Inputs& v) { return max_pool(v[0], pool); });
  PoolParams avg;
  avg.kernel = {3};
  avg.stride = {2};
  avg.padding = {{1, 1}};
  check("avg_pool", {{x, S}}, [&](const Inputs& v) { return avg_pool(v[0], avg); });
  // Composed of pow, avg_pool and scale: autograd goes through those.
  check("lp_pool", {{x, S}},
        [&](const Inputs& v) { return lp_pool(v[0], 2.0, {3}, {2}, /*ceil_mode=*/true); });
  check("adaptive_avg_pool", {{x, S}}, [&](const Inputs& v) {
    return adaptive_avg_pool(v[0], {3, 2});
  });
  check("adaptive_max_pool", {{x, S}}, [&](const Inputs& v) {
    return adaptive_max_pool(v[0], {3, 2});
  });
  UpsampleParams up;
  up.mode = UpsampleMode::Linear;
  up.scale_factor = {2.0, 2.0};
  check("upsample linear", {{x, S}}, [&](const Inputs& v) { return upsample(v[0], up); });
  UpsampleParams nearest;
  nearest.size = {9, 13};
  check("upsample nearest", {{x, S}}, [&](const Inputs& v) { return upsample(v[0], nearest); });
  check("pad reflect", {{x, S}}, [&](const Inputs& v) {
    return pad(v[0], {{1, 2}, {2, 1}}, PadMode::Reflect);
  });
  check("group_norm", {{x, S}, {{4}, R}, {{4}, R}},
        [&](const Inputs& v) { return group_norm(v[0], 2, v[1], v[2]); });
  check("batch_norm", {{x, S}, {{4}, R}, {{4}, R}}, [&](const Inputs& v) {
    return batch_norm(v[0], v[1], v[2], std::nullopt, std::nullopt, true).output;
  });
  check("instance_norm", {{x, Sb}, {{4}, R}, {{4}, R}},
        [&](const Inputs& v) { return instance_norm(v[0], v[1], v[2]); });
  check("layer_norm", {{x, S}, {{4, 7, 6}, R}, {{4, 7, 6}, R}},
        [&](const Inputs& v) { return layer_norm(v[0], v[1], v[2]); });
  check("cat", {{x, S}, {{2, 3, 7, 6}, S}}, [&](const Inputs& v) { return cat({v[0], v[1]}, 1); });
  check("relu", {{x, S}}, [&](const Inputs& v) { return relu(v[0]); });
  check("leaky_relu", {{x, S}}, [&](const Inputs& v) { return leaky_relu(v[0], 0.2); });
  check("gelu tanh", {{x, S}}, [&](const Inputs& v) { return gelu(v[0], GeluApproximate::Tanh); });
  check("silu", {{x, S}}, [&](const Inputs& v) { return silu(v[0]); });
  check("sigmoid", {{x, S}}, [&](const Inputs& v) { return sigmoid(v[0]); });
  check("tanh", {{x, S}}, [&](const Inputs& v) { return dtensor::tanh(v[0]); });
  check("mse_loss", {{x, S}, {x, S}}, [&](const Inputs& v) { return mse_loss(v[0], v[1]); });
  check("l1_loss sum", {{x, S}, {x, S}},
        [&](const Inputs& v) { return l1_loss(v[0], v[1], LossReduction::Sum); });
  check("smooth_l1_loss beta 0.3", {{x, S}, {x, R}},
        [&](const Inputs& v) { return smooth_l1_loss(v[0], v[1], LossReduction::Mean, 0.3); });
  check("huber_loss delta 0.4", {{x, S}, {x, S}},
        [&](const Inputs& v) { return huber_loss(v[0], v[1], LossReduction::Sum, 0.4); });
  // bce's target is data (no gradient): a fixed tensor placed like the input.
  Tensor probabilities = Tensor::rand(x, DType::F64, 99);
  for (std::int64_t i = 0; i < probabilities.numel(); ++i)
    probabilities.data<double>()[i] = (1 + probabilities.data<double>()[i]) / 2;
  check("binary_cross_entropy_with_logits", {{x, S}}, [&](const Inputs& v) {
    return binary_cross_entropy_with_logits(
        v[0], distribute_tensor(probabilities, v[0].mesh(), v[0].placements()));
  });
  // cross_entropy with class indices: the target (i64, some ignore_index)
  // is data; given replicated, and placed like the input's other dims.
  Tensor classes = Tensor::empty({2, 7, 6}, DType::I64);
  for (std::int64_t i = 0; i < classes.numel(); ++i)
    classes.data<std::int64_t>()[i] = i % 7 == 3 ? -100 : (i * 5) % 4;
  Tensor classes_0_to_3 = classes.clone();  // -100 made 1, ignored below as ignore_index 1
  for (std::int64_t i = 0; i < classes.numel(); ++i)
    if (classes_0_to_3.data<std::int64_t>()[i] < 0) classes_0_to_3.data<std::int64_t>()[i] = 1;
  check("cross_entropy class indices label_smoothing", {{x, S}}, [&](const Inputs& v) {
    const DTensor t = distribute_tensor(classes, v[0].mesh(), all_replicated(v[0].mesh()));
    return cross_entropy(v[0], t, {.label_smoothing = 0.2});
  });
  check("cross_entropy class indices sum ignore_index 1", {{x, Sb}}, [&](const Inputs& v) {
    Placements tp;
    for (const Placement& p : v[0].placements())
      tp.push_back(p.is_shard() && p.dim() != 1 ? Placement(Shard(p.dim() == 0 ? 0 : p.dim() - 1))
                                                : Placement(Replicate()));
    return cross_entropy(v[0], distribute_tensor(classes_0_to_3, v[0].mesh(), tp),
                         {.reduction = LossReduction::Sum, .ignore_index = 1});
  });
  check("add mul scale", {{x, S}, {x, S}},
        [&](const Inputs& v) { return scale(mul(add(v[0], v[1]), v[0]), 0.5); });
  // Broadcasting binary operators: the small operand's gradient is summed
  // over the (sharded) dims it is repeated along.
  check("sub div broadcast", {{x, S}, {{4, 1, 1}, R}},
        [&](const Inputs& v) { return (v[0] - v[1]) / (v[1] + 3.0); });
  check("maximum minimum broadcast", {{x, S}, {{6}, R}},
        [&](const Inputs& v) { return maximum(v[0], v[1]) * minimum(v[0], v[1]); });
  check("mul scalar-shaped", {{x, S}, {{}, R}}, [&](const Inputs& v) { return v[0] * v[1]; });
  check("exp sqrt log rsqrt", {{x, S}}, [&](const Inputs& v) {
    const DTensor e = exp(v[0]);
    return sqrt(e) + natural_log(square(v[0]) + 1.0) - rsqrt(e);
  });
  check("abs neg clamp pow", {{x, S}},
        [&](const Inputs& v) { return -abs(v[0]) + clamp(v[0], -0.8, 0.1) + pow(exp(v[0]), 1.5); });
  check("mean", {{x, S}}, [&](const Inputs& v) { return mean(v[0]); });
  // Shape operators: H (7, uneven) and W sharded through views, squared so
  // that the gradient depends on where each value went.
  check("transpose reshape narrow flatten permute", {{x, S}}, [&](const Inputs& v) {
    const DTensor t = v[0].transpose(1, 3).reshape({2, -1, 28}).narrow(2, 3, 20);
    return square(t.flatten(1)).reshape({2, 6, 20}).permute({2, 0, 1});
  });
  // Reductions over dims, the sharded ones among them, and softmax along a
  // sharded dim.
  check("sum mean dims", {{x, S}}, [&](const Inputs& v) {
    return sum(v[0], {2, 3}) * mean(v[0], {-1, 2}) + sum(sum(v[0], {1}, true), {2, 3});
  });
  check("amax amin dims", {{x, S}}, [&](const Inputs& v) {
    return amax(v[0], {2}, true) - amin(v[0], {0, 3}, true);
  });
  check("var dims", {{x, S}}, [&](const Inputs& v) {
    return var(v[0], {2, 3}, 1.0, true) + var(v[0], {0, 2}, 0.5, true);
  });
  check("softmax log_softmax", {{x, S}},
        [&](const Inputs& v) { return softmax(v[0], 2) + log_softmax(v[0], -1); });
  // linear over W (6): on the 2x2 mesh the input's features are sharded.
  check("linear", {{x, S}, {{5, 6}, R}, {{5}, R}},
        [&](const Inputs& v) { return linear(v[0], v[1], v[2]); });
  check("linear no bias rows sharded", {{x, Sb}, {{3, 6}, R}},
        [&](const Inputs& v) { return linear(v[0], v[1]); });
  check("dropout", {{x, S}}, [&](const Inputs& v) { return dropout(v[0], 0.3, 5, 2); });
  check("redistribute", {{x, S}}, [&](const Inputs& v) {
    return relu(v[0].redistribute(v[0].mesh(), all_replicated(v[0].mesh())));
  });
  // A small network: every gradient through shared uses (enc used twice).
  check("conv pool up cat conv", {{x, S}, {{4, 4, 3, 3}, R}, {{4, 8, 1, 1}, R}},
        [&](const Inputs& v) {
          const DTensor enc = relu(convolution(v[0], v[1], std::nullopt, cp));
          PoolParams p2;
          p2.kernel = {2};
          UpsampleParams u;
          u.size = {7, 6};
          const DTensor back = upsample(max_pool(enc, p2), u);
          return convolution(cat({back, enc}, 1), v[2], std::nullopt, ConvParams{});
        });
}

}  // namespace

DTENSOR_TEST_CASE("autograd gradients of every op - finite differences 2 ranks", "[autograd]", 2) {
  check_every_op(DeviceMesh(DeviceType::CPU, {2}));
}

DTENSOR_TEST_CASE("autograd gradients of every op - finite differences 2x2", "[autograd]", 4) {
  check_every_op(DeviceMesh(DeviceType::CPU, {2, 2}));
}
