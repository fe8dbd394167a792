// nn::Linear and nn::Dropout: PyTorch's parameter names, shapes and default
// initialisation bounds, alike on every rank; Linear's forward and gradients
// against a naive product; Dropout honouring train/eval and
// dtensor::manual_seed, on 1 and 2 ranks and in a Sequential.
#include <catch2/catch.hpp>

#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

std::vector<std::string> names(const std::vector<std::pair<std::string, DTensor*>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v)
    out.push_back(n);
  return out;
}

void check_linear_module(const DeviceMesh& mesh, Placements px) {
  // Different seeds per rank: distribute() takes rank 0's values.
  nn::manual_seed(static_cast<std::uint64_t>(get_rank()) + 7);
  nn::Linear lin(6, 4, true, DType::F64);
  nn::Linear no_bias(6, 4, false, DType::F64);
  lin.distribute(mesh);
  no_bias.distribute(mesh);
  CHECK(names(lin.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names(no_bias.named_parameters()) == std::vector<std::string>{"weight"});
  const DTensor& w = *lin.named_parameters()[0].second;
  const DTensor& b = *lin.named_parameters()[1].second;
  CHECK(w.shape() == Shape{4, 6});
  CHECK(b.shape() == Shape{4});
  CHECK(w.requires_grad());
  // U(-1/sqrt(in), 1/sqrt(in)) for both (kaiming_uniform with a = sqrt(5)).
  const double bound = 1.0 / std::sqrt(6.0);
  for (const DTensor* t : {&w, &b}) {
    const Tensor v = t->to_local();
    for (std::int64_t i = 0; i < v.numel(); ++i)
      CHECK(std::abs(v.item_flat(i)) <= bound);
  }
  Tensor first = Tensor::full({1}, w.to_local().item_flat(0), DType::F64);
  world()->allreduce(first, ReduceOp::Max);
  CHECK(first.item_flat(0) == w.to_local().item_flat(0));  // rank 0's everywhere

  const Tensor X = Tensor::rand({5, 3, 6}, DType::F64, 11);
  DTensor x = distribute_tensor(X, mesh, px);
  x.requires_grad_();
  const DTensor y = lin(x);
  const Tensor W = w.to_local(), B = b.to_local(), Y = y.full_tensor();
  REQUIRE(Y.shape() == Shape{5, 3, 4});
  for (std::int64_t r = 0; r < 15; ++r)
    for (std::int64_t k = 0; k < 4; ++k) {
      double s = B.item_flat(k);
      for (std::int64_t i = 0; i < 6; ++i)
        s += X.item_flat(r * 6 + i) * W.item_flat(k * 6 + i);
      CHECK(std::abs(Y.item_flat(r * 4 + k) - s) < 1e-12);
    }
  // d sum(y) / d bias = the number of rows, on every rank.
  backward(sum(y));
  REQUIRE(b.grad().has_value());
  for (std::int64_t k = 0; k < 4; ++k)
    CHECK(std::abs(b.grad()->to_local().item_flat(k) - 15.0) < 1e-12);
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->placements() == px);
}

void check_dropout_module(const DeviceMesh& mesh, Placements px) {
  nn::Dropout drop(0.25);
  CHECK(drop.named_parameters().empty());
  drop.distribute(mesh);
  const Tensor X =
      Tensor::rand({40, 50}, DType::F64, 3).add_(Tensor::full({40, 50}, 2.0, DType::F64));
  const DTensor x = distribute_tensor(X, mesh, px);
  manual_seed(5);
  const Tensor a = drop(x).full_tensor();
  const Tensor b = drop(x).full_tensor();
  std::int64_t zeros = 0, differ = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double v = a.item_flat(i);
    zeros += v == 0;
    differ += (v == 0) != (b.item_flat(i) == 0);
    if (v != 0) CHECK(std::abs(v - X.item_flat(i) / 0.75) < 1e-12);
  }
  CHECK(std::abs(static_cast<double>(zeros) / 2000.0 - 0.25) < 0.05);
  CHECK(differ > 0);  // two calls, two masks
  manual_seed(5);
  CHECK(max_abs_diff(drop(x).full_tensor(), a) == 0);  // reseeded: the first mask again
  drop.eval();
  CHECK(max_abs_diff(drop(x).full_tensor(), X) == 0);
  drop.train();
  nn::Sequential seq;
  seq.push_back(std::make_shared<nn::Linear>(50, 3, true, DType::F64));
  seq.push_back(std::make_shared<nn::Dropout>(0.5));
  seq.distribute(mesh);
  seq.eval();
  CHECK(seq(x).shape() == Shape{40, 3});
  CHECK_THROWS_WITH(nn::Dropout(1.5), Catch::Contains("p:"));
}

}  // namespace

DTENSOR_TEST_CASE("modules Linear: names, init bounds, forward, gradients - 1 rank", "[modules]",
                  1) {
  check_linear_module(DeviceMesh(DeviceType::CPU, {1}), {Replicate()});
}

DTENSOR_TEST_CASE("modules Linear: names, init bounds, forward, gradients - 2 ranks", "[modules]",
                  2) {
  check_linear_module(DeviceMesh(DeviceType::CPU, {2}), {Shard(0)});
  check_linear_module(DeviceMesh(DeviceType::CPU, {2}), {Shard(2)});
}

DTENSOR_TEST_CASE("modules Dropout: train and eval, manual_seed - 1 rank", "[modules]", 1) {
  check_dropout_module(DeviceMesh(DeviceType::CPU, {1}), {Replicate()});
}

DTENSOR_TEST_CASE("modules Dropout: train and eval, manual_seed - 2 ranks", "[modules]", 2) {
  check_dropout_module(DeviceMesh(DeviceType::CPU, {2}), {Shard(1)});
}
