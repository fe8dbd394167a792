// The engine's contract: what is recorded and when, accumulation, freeing,
// no-grad scopes, user operators' backwards, and where gradients end up.
#include <catch2/catch.hpp>

#include "dtensor/dtensor.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

DTensor leaf(const Shape& shape, const DeviceMesh& mesh, const Placements& p, std::uint64_t seed) {
  DTensor x = distribute_tensor(Tensor::rand(shape, DType::F64, seed), mesh, p);
  x.requires_grad_();
  return x;
}

// cube(x) = x^3, a user operator with its backward in the same OpDef.
void register_cube() {
  if (has_op("test_cube")) return;
  OpDef d;
  d.name = "test_cube";
  d.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  d.signatures = [](const OpSchema& s) {
    std::vector<ShardingSignature> sigs{{{Replicate()}, {Replicate()}}};
    for (std::int64_t k = 0; k < s.dtensor(0).ndim(); ++k)
      sigs.push_back({{Shard(k)}, {Shard(k)}});
    return sigs;
  };
  d.backward = [](const BackwardCall& c) -> std::vector<std::optional<DTensor>> {
    const DTensor& x = c.forward.dtensor(0);
    return {scale(mul(*c.grad_outputs[0], mul(x, x)), 3.0)};
  };
  register_op(d);
  register_kernel("test_cube", DeviceType::CPU, DType::F64, [](const KernelCall& k) {
    Tensor y = k.local(0).clone();
    double* p = y.data<double>();
    for (std::int64_t i = 0; i < y.numel(); ++i)
      p[i] = p[i] * p[i] * p[i];
    return std::vector<Tensor>{y};
  });
}

// twice(x) = 2x without a backward: `differentiable` says whether that is on
// purpose. The kernel is the same either way.
void register_twice(const std::string& name, bool differentiable) {
  if (has_op(name)) return;
  OpDef d;
  d.name = name;
  d.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  d.signatures = [](const OpSchema&) {
    return std::vector<ShardingSignature>{{{Replicate()}, {Replicate()}}, {{Shard(0)}, {Shard(0)}}};
  };
  d.differentiable = differentiable;
  register_op(d);
  register_kernel(name, DeviceType::CPU, DType::F64, [](const KernelCall& k) {
    Tensor y = k.local(0).clone();
    for (std::int64_t i = 0; i < y.numel(); ++i)
      y.data<double>()[i] *= 2;
    return std::vector<Tensor>{y};
  });
}

}  // namespace

DTENSOR_TEST_CASE("autograd refuses to cut the graph at an operator without a backward",
                  "[autograd]", 2) {
  register_twice("test_twice_no_backward", true);
  register_twice("test_twice_constant", false);
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = leaf({4, 3}, mesh, {Shard(0)}, 1);
  // Without a backward, and not marked: recorded, and backward() through it
  // raises, naming the operator, instead of giving x the gradient of sum(x)
  // alone (1 where the true one is 3).
  const DTensor y = dispatch("test_twice_no_backward", {x}).at(0);
  CHECK(y.requires_grad());
  CHECK_THROWS_AS(backward(add(sum(y), sum(x))), NotSupported);
  CHECK_THROWS_WITH(backward(add(sum(dispatch("test_twice_no_backward", {x}).at(0)), sum(x))),
                    Catch::Contains("operator 'test_twice_no_backward' has no backward") &&
                        Catch::Contains("OpDef::differentiable = false"));
  // Marked non-differentiable on purpose: outside the graph, and backward()
  // gives the gradient of the other term (1 everywhere).
  x.set_grad(std::nullopt);
  const DTensor c = dispatch("test_twice_constant", {x}).at(0);
  CHECK_FALSE(c.requires_grad());
  backward(add(sum(mul(c, c.detach())), sum(x)));
  const Tensor g = x.grad()->full_tensor();
  for (std::int64_t i = 0; i < g.numel(); ++i)
    CHECK(g.item_flat(i) == 1.0);
}

DTENSOR_TEST_CASE("autograd records only with grad on and an input requiring grad", "[autograd]",
                  2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = leaf({4, 3}, mesh, {Shard(0)}, 1);
  DTensor c = distribute_tensor(Tensor::rand({4, 3}, DType::F64, 2), mesh, {Shard(0)});
  CHECK(relu(x).requires_grad());
  CHECK_FALSE(relu(x).is_leaf());
  CHECK(relu(x).grad_fn()->name() == "relu");
  CHECK_FALSE(relu(c).requires_grad());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(is_grad_enabled());
    CHECK_FALSE(relu(x).requires_grad());
  }
  CHECK(is_grad_enabled());
  CHECK_FALSE(relu(x.detach()).requires_grad());
  CHECK_THROWS_AS(relu(x).requires_grad_(false), InvalidArgument);
  // Results of a handler's inner operators are not recorded: one node.
  const DTensor y = convolution(leaf({1, 2, 6, 6}, mesh, {Shard(2)}, 3),
                                leaf({2, 2, 3, 3}, mesh, {Replicate()}, 4), std::nullopt, {});
  CHECK(y.grad_fn()->name() == "convolution");
  CHECK(y.grad_fn()->next_edges().size() == 2);
}

DTENSOR_TEST_CASE("autograd accumulates - frees the graph - retains on request", "[autograd]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = leaf({4, 3}, mesh, {Shard(0)}, 1);
  const Tensor X = x.full_tensor().clone();
  DTensor loss = sum(mul(x, x));  // d/dx = 2x
  backward(loss, std::nullopt, /*retain_graph=*/true);
  CHECK(max_abs_diff(x.grad()->full_tensor(), X.clone().add_(X)) < 1e-12);
  backward(loss);  // accumulates: 4x
  Tensor four = X.clone().add_(X);
  four.add_(four.clone());
  CHECK(max_abs_diff(x.grad()->full_tensor(), four) < 1e-12);
  CHECK_THROWS_WITH(backward(loss), Catch::Contains("retain_graph"));
  x.set_grad(std::nullopt);
  CHECK_FALSE(x.grad().has_value());
  CHECK_THROWS_AS(backward(relu(x)), InvalidArgument);  // not one element: needs grad
  CHECK_THROWS_AS(backward(x.detach()), InvalidArgument);
}

DTENSOR_TEST_CASE("autograd user operator declares its backward in its OpDef", "[autograd]", 2) {
  register_cube();
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = leaf({5, 2}, mesh, {Shard(0)}, 7);
  const Tensor X = x.full_tensor().clone();
  backward(sum(dispatch("test_cube", {x}).at(0)));
  const Tensor g = x.grad()->full_tensor();
  for (std::int64_t i = 0; i < X.numel(); ++i)
    CHECK(std::abs(g.item_flat(i) - 3 * X.item_flat(i) * X.item_flat(i)) < 1e-12);
}

DTENSOR_TEST_CASE("autograd replicated weight gradients are reduced once at the end", "[autograd]",
                  2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor x = distribute_tensor(Tensor::rand({2, 3, 8, 8}, DType::F64, 1), mesh, {Shard(2)});
  DTensor w1 = leaf({3, 3, 3, 3}, mesh, {Replicate()}, 2);
  DTensor w2 = leaf({3, 3, 3, 3}, mesh, {Replicate()}, 3);
  ConvParams p;
  p.padding = {{1, 1}};
  const DTensor loss =
      mean(convolution(relu(convolution(x, w1, std::nullopt, p)), w2, std::nullopt, p));
  backward(loss);
  // Each weight's gradient is whole and the same on both ranks: Replicate.
  for (DTensor* w : {&w1, &w2}) {
    REQUIRE(w->grad().has_value());
    CHECK(w->grad()->placements() == Placements{Replicate()});
  }
  // The same on one process (a 1-rank mesh of this rank alone is not
  // available here, so compare with the whole computation done replicated).
  DTensor xr = x.redistribute(mesh, {Replicate()});
  DTensor v1 = leaf({3, 3, 3, 3}, mesh, {Replicate()}, 2);
  DTensor v2 = leaf({3, 3, 3, 3}, mesh, {Replicate()}, 3);
  backward(mean(convolution(relu(convolution(xr, v1, std::nullopt, p)), v2, std::nullopt, p)));
  CHECK(max_abs_diff(w1.grad()->to_local(), v1.grad()->to_local()) < 1e-12);
  CHECK(max_abs_diff(w2.grad()->to_local(), v2.grad()->to_local()) < 1e-12);
}
