// Modules: PyTorch's parameter names and order, state_dict round trips,
// strict loading, sharding plans, train/eval and buffers.
#include <catch2/catch.hpp>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

// A user module built from library modules.
class Block : public nn::Module {
 public:
  explicit Block(DType dtype) {
    nn::ConvOptions o;
    o.padding = {1};
    o.dtype = dtype;
    conv = register_module("conv", std::make_shared<nn::Conv2d>(2, 4, 3, o));
    norm =
        register_module("norm", std::make_shared<nn::BatchNorm>(4, 1e-5, 0.1, true, true, dtype));
    scale_ = register_parameter("scale", Tensor::full({1}, 2.0, dtype));
  }
  DTensor forward(const DTensor& x) override { return relu(norm->forward(conv->forward(x))); }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm> norm;
  Ref scale_;
};

std::vector<std::string> names(const std::vector<std::pair<std::string, DTensor*>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v)
    out.push_back(n);
  return out;
}

}  // namespace

DTENSOR_TEST_CASE("modules name parameters and buffers as PyTorch does", "[modules]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  nn::Sequential seq;
  seq.push_back(std::make_shared<Block>(DType::F64));
  seq.push_back(std::make_shared<nn::ReLU>());
  seq.push_back(std::make_shared<nn::ConvTranspose2d>(4, 2, 2));
  CHECK_THROWS_AS(seq.named_parameters(), InvalidArgument);  // not distributed yet
  // A forward before distribute names the first parameter registered,
  // whichever one the forward happens to read first.
  nn::Conv2d lone(2, 4, 3);
  const DTensor x0 =
      distribute_tensor(Tensor::zeros({1, 2, 5, 5}, DType::F32), mesh, {Replicate()});
  CHECK_THROWS_WITH(lone.forward(x0),
                    Catch::Contains("weight: the module is not distributed yet (call distribute"));
  seq.distribute(mesh);
  // torch: own parameters, then children's, in registration order.
  CHECK(names(seq.named_parameters()) ==
        std::vector<std::string>{"0.scale", "0.conv.weight", "0.conv.bias", "0.norm.weight",
                                 "0.norm.bias", "2.weight", "2.bias"});
  CHECK(names(seq.named_buffers()) == std::vector<std::string>{"0.norm.running_mean",
                                                               "0.norm.running_var",
                                                               "0.norm.num_batches_tracked"});
  std::vector<std::string> sd;
  for (const auto& [n, t] : seq.state_dict())
    sd.push_back(n);
  CHECK(sd == std::vector<std::string>{"0.scale", "0.conv.weight", "0.conv.bias", "0.norm.weight",
                                       "0.norm.bias", "0.norm.running_mean", "0.norm.running_var",
                                       "0.norm.num_batches_tracked", "2.weight", "2.bias"});
  for (auto* p : seq.parameters())
    CHECK(p->requires_grad());
  // PyTorch's layouts.
  CHECK(seq.named_parameters()[1].second->shape() == Shape{4, 2, 3, 3});
  CHECK(seq.named_parameters()[5].second->shape() == Shape{4, 2, 2, 2});
}

DTENSOR_TEST_CASE("modules initialise within torch's bounds and alike on every rank", "[modules]",
                  2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  // Different seeds per rank: distribute() takes rank 0's values.
  nn::manual_seed(static_cast<std::uint64_t>(get_rank()) + 1);
  nn::Conv2d conv(3, 5, 3, {.dtype = DType::F64});
  conv.distribute(mesh);
  const Tensor w = conv.weight().to_local();
  const double bound = 1.0 / std::sqrt(27.0);
  double lo = 1, hi = -1;
  for (std::int64_t i = 0; i < w.numel(); ++i) {
    lo = std::min(lo, w.item_flat(i));
    hi = std::max(hi, w.item_flat(i));
  }
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi - lo > bound);  // spread over the range, not constant
  Tensor sum = Tensor::full({1}, w.item_flat(0), DType::F64);
  world()->allreduce(sum, ReduceOp::Max);
  CHECK(sum.item_flat(0) == w.item_flat(0));
}

DTENSOR_TEST_CASE("modules state_dict round trip - strict loading - sharding plan", "[modules]",
                  2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  nn::manual_seed(1);
  Block a(DType::F64);
  a.distribute(mesh, {{{"*.weight", {Shard(0)}}}});
  CHECK(a.conv->weight().placements() == Placements{Shard(0)});
  CHECK(a.named_parameters()[2].second->placements() == Placements{Replicate()});  // conv.bias
  nn::manual_seed(2);
  Block b(DType::F64);
  b.distribute(mesh);
  const DTensor* before = b.named_parameters()[1].second;
  b.load_state_dict(a.state_dict());
  CHECK(b.named_parameters()[1].second == before);  // loaded in place
  CHECK(max_abs_diff(b.conv->weight().full_tensor(), a.conv->weight().full_tensor()) == 0);
  auto partial = a.state_dict();
  partial.pop_back();
  CHECK_THROWS_WITH(b.load_state_dict(partial),
                    Catch::Contains("missing [norm.num_batches_tracked]"));
  b.load_state_dict(partial, /*strict=*/false);
  auto extra = a.state_dict();
  extra.emplace_back("bogus", extra.front().second);
  CHECK_THROWS_WITH(b.load_state_dict(extra), Catch::Contains("unexpected [bogus]"));
}

DTENSOR_TEST_CASE("modules batch norm updates its buffers in training only", "[modules]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  nn::BatchNorm bn(3, 1e-5, 0.1, true, true, DType::F64);
  bn.distribute(mesh);
  const DTensor x = distribute_tensor(Tensor::rand({4, 3, 6}, DType::F64, 3), mesh, {Shard(0)});
  bn(x);
  CHECK(bn.named_buffers()[2].second->to_local().item_flat(0) == 1);
  const double mean0 = bn.named_buffers()[0].second->to_local().item_flat(0);
  CHECK(mean0 != 0);
  bn.eval();
  CHECK_FALSE(bn.is_training());
  bn(x);
  CHECK(bn.named_buffers()[2].second->to_local().item_flat(0) == 1);
  CHECK(bn.named_buffers()[0].second->to_local().item_flat(0) == mean0);
}
