// Identity, ModuleList and ModuleDict (names, order, indexing, refusals),
// Module::to(dtype) (values, placements, identity and gradients kept) and
// Module::distribute() on what was distributed before.
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;
using Catch::Contains;

namespace {

std::vector<std::string> names(const std::vector<std::pair<std::string, DTensor*>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v)
    out.push_back(n);
  return out;
}

std::shared_ptr<nn::Conv2d> conv(std::int64_t in, std::int64_t out, DType dtype = DType::F32) {
  nn::ConvOptions o;
  o.dtype = dtype;
  return std::make_shared<nn::Conv2d>(in, out, 1, o);
}

}  // namespace

DTENSOR_TEST_CASE("containers: Identity, ModuleList and ModuleDict name and hold modules",
                  "[modules]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  // register_module is protected: a subclass registers (as a user module does).
  struct Registering : nn::Module {
    Registering(std::shared_ptr<nn::ModuleList> l, std::shared_ptr<nn::ModuleDict> d) {
      register_module("blocks", std::move(l));
      register_module("heads", std::move(d));
    }
  };
  auto l = std::make_shared<nn::ModuleList>(std::vector<std::shared_ptr<nn::Module>>{conv(2, 3)});
  l->append(std::make_shared<nn::Identity>());
  l->append(conv(3, 2));
  auto d = std::make_shared<nn::ModuleDict>();
  d->insert("b", conv(2, 2, DType::F64));
  d->insert("a", conv(2, 1));
  Registering m(l, d);
  m.distribute(mesh);
  // torch's names: list indices (Identity has none), dict keys in insertion order.
  CHECK(names(m.named_parameters()) == std::vector<std::string>{"blocks.0.weight", "blocks.0.bias",
                                                                "blocks.2.weight", "blocks.2.bias",
                                                                "heads.b.weight", "heads.b.bias",
                                                                "heads.a.weight", "heads.a.bias"});
  CHECK(l->size() == 3);
  CHECK((*l)[-1] == (*l)[2]);
  CHECK_THROWS_AS((*l)[3], InvalidArgument);
  CHECK_THROWS_WITH((*l)[-4], Contains("index -4"));
  CHECK(d->keys() == std::vector<std::string>{"b", "a"});
  CHECK(d->contains("a"));
  CHECK_FALSE(d->contains("c"));
  CHECK_THROWS_WITH((*d)["c"], Contains("key 'c'"));
  CHECK_THROWS_WITH(d->insert("a", conv(1, 1)), Contains("key 'a'"));
  CHECK_THROWS_WITH(d->insert("x.y", conv(1, 1)), Contains("key 'x.y'"));
  CHECK_THROWS_AS(
      l->forward(distribute_tensor(Tensor::rand({1, 2, 2, 2}, DType::F32, 1), mesh, {Replicate()})),
      NotSupported);

  const DTensor x = distribute_tensor(Tensor::rand({2, 3, 4, 4}, DType::F32, 2), mesh, {Shard(2)});
  nn::Identity id;
  const DTensor y = id(x);
  CHECK(y.to_local().data<float>() == x.to_local().data<float>());
  // train/eval reaches what the containers hold.
  m.eval();
  CHECK_FALSE((*l)[0]->is_training());
  CHECK_FALSE((*d)["a"]->is_training());
}

DTENSOR_TEST_CASE("Module::to converts parameters in place, keeping placements and gradients",
                  "[modules]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  nn::manual_seed(3);
  nn::Conv2d before_distribute(2, 4, 3);
  before_distribute.to(DType::F64);
  before_distribute.distribute(mesh);
  for (auto& [name, p] : before_distribute.named_parameters())
    CHECK(p->dtype() == DType::F64);

  nn::manual_seed(3);
  nn::Conv2d m(2, 4, 3);
  nn::ShardingPlan plan;
  plan.rules.emplace_back("weight", Placements{Shard(0)});
  m.distribute(mesh, plan);
  const auto params = m.named_parameters();
  std::vector<Tensor> was;
  for (auto& [name, p] : params)
    was.push_back(p->full_tensor());
  params[0].second->set_grad(
      distribute_tensor(Tensor::rand({4, 2, 3, 3}, DType::F32, 9), mesh, {Shard(0)}));
  const Tensor grad_was = params[0].second->grad()->full_tensor();

  m.to(DType::BF16);
  const auto after = m.named_parameters();
  REQUIRE(after.size() == params.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    INFO(after[i].first);
    CHECK(after[i].second == params[i].second);  // the same object: optimisers keep it
    CHECK(after[i].second->dtype() == DType::BF16);
    CHECK(after[i].second->requires_grad());
    CHECK(after[i].second->placements() ==
          (i == 0 ? Placements{Shard(0)} : Placements{Replicate()}));
    const Tensor now = after[i].second->full_tensor();
    // Independent of the conversion code: bf16 keeps 8 significant bits.
    for (std::int64_t k = 0; k < now.numel(); ++k)
      CHECK(std::abs(now.item_flat(k) - was[i].item_flat(k)) <=
            std::ldexp(std::abs(was[i].item_flat(k)), -8));
  }
  const auto g = after[0].second->grad();
  REQUIRE(g.has_value());
  CHECK(g->dtype() == DType::BF16);
  CHECK(g->placements() == Placements{Shard(0)});
  const Tensor gnow = g->full_tensor();
  for (std::int64_t k = 0; k < gnow.numel(); ++k)
    CHECK(std::abs(gnow.item_flat(k) - grad_was.item_flat(k)) <=
          std::ldexp(std::abs(grad_was.item_flat(k)), -8));
  // The module still runs, in bf16.
  const DTensor x = distribute_tensor(Tensor::rand({1, 2, 6, 6}, DType::BF16, 4), mesh, {Shard(2)});
  CHECK(m(x).dtype() == DType::BF16);
}

DTENSOR_TEST_CASE("a module used twice is distributed once and its parameters listed once",
                  "[modules]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  auto shared = conv(2, 2);
  auto seq = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{shared, conv(2, 2), shared});
  seq->distribute(mesh);
  // torch's remove_duplicate: the first name only; state_dict keeps both.
  CHECK(names(seq->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"});
  CHECK(seq->parameters().size() == 4);
  CHECK(seq->state_dict().size() == 6);
  // Both uses see the same values: y = shared(conv(shared(x))).
  const DTensor x = distribute_tensor(Tensor::rand({1, 2, 4, 4}, DType::F32, 1), mesh, {Shard(2)});
  const DTensor y = (*seq)(x);
  const DTensor z = (*shared)((*seq->named_children()[1].second)((*shared)(x)));
  CHECK(max_abs_diff(y.full_tensor(), z.full_tensor()) == 0);
}

DTENSOR_TEST_CASE("a module that is or contains the one it is registered in is refused",
                  "[modules]", 1) {
  const DeviceMesh mesh(DeviceType::CPU, {1});
  auto inner =
      std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{conv(2, 2)});
  auto outer = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{inner, conv(2, 2), inner});  // shared twice: fine
  CHECK_THROWS_WITH(inner->push_back(inner),
                    Contains("register_module: '1'") && Contains("a module cannot contain itself"));
  CHECK_THROWS_AS(inner->push_back(outer), InvalidArgument);  // outer holds inner
  // Two levels down, through the shared module.
  auto top = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{outer});
  CHECK_THROWS_AS(inner->push_back(top), InvalidArgument);
  // A refusal leaves the modules as they were: they walk, place and run.
  CHECK(inner->named_children().size() == 1);
  top->distribute(mesh);
  CHECK(names(top->named_parameters()) ==
        std::vector<std::string>{"0.0.0.weight", "0.0.0.bias", "0.1.weight", "0.1.bias"});
  top->eval();
  CHECK(!inner->is_training());
  const DTensor x = distribute_tensor(Tensor::rand({1, 2, 4, 4}, DType::F32, 1), mesh, {Shard(2)});
  CHECK((*top)(x).shape() == std::vector<std::int64_t>{1, 2, 4, 4});
}

DTENSOR_TEST_CASE(
    "Module::distribute again: what was placed stays where the plan agrees, else an "
    "InvalidArgument naming it on every rank, before anything is placed",
    "[modules]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  nn::ShardingPlan sharded;
  sharded.rules.emplace_back("0.weight", Placements{Shard(0)});
  // A leaf distributed twice alike: nothing changes (its initial values are
  // gone; placing it again used to fail on them).
  auto leaf = conv(2, 4);
  leaf->distribute(mesh);
  const Tensor values = leaf->named_parameters()[0].second->full_tensor();
  CHECK_NOTHROW(leaf->distribute(mesh));
  CHECK(max_abs_diff(leaf->named_parameters()[0].second->full_tensor(), values) == 0.0);
  // A container whose first child was placed on its own, sharded: the
  // container's default plan (replicate) disagrees, and says so, naming it,
  // before the second child (not distributed yet) is placed.
  auto first = conv(2, 4), second = conv(4, 2);
  nn::Sequential pre({first});
  pre.distribute(mesh, sharded);
  nn::Sequential whole({first, second});
  CHECK_THROWS_WITH(whole.distribute(mesh),
                    Contains("0.weight is already distributed, as S(0)") && Contains("asks for R"));
  CHECK_FALSE(second->is_distributed());
  CHECK_THROWS_AS(second->named_parameters(), InvalidArgument);  // not placed
  // The plan that agrees places the rest and keeps the first as it was.
  whole.distribute(mesh, sharded);
  CHECK(first->named_parameters()[0].second->placements() == Placements{Shard(0)});
  CHECK(second->named_parameters()[0].second->placements() == Placements{Replicate()});
  // Again, another plan: refused; the same: nothing changes.
  CHECK_THROWS_AS(whole.distribute(mesh), InvalidArgument);
  CHECK_NOTHROW(whole.distribute(mesh, sharded));
  // A plan by negative dims asks what the placed tensor has (Shard(-4) of a
  // [4, 2, 1, 1] weight is its Shard(0)).
  nn::ShardingPlan negative;
  negative.rules.emplace_back("0.weight", Placements{Shard(-4)});
  CHECK_NOTHROW(whole.distribute(mesh, negative));
  // A plan that cannot be made (two placements on a 1-D mesh) is refused
  // before anything is placed: the first child, not placed yet, still is not.
  auto third = conv(2, 4), fourth = conv(4, 2);
  nn::Sequential fresh({third, fourth});
  nn::ShardingPlan bad;
  bad.rules.emplace_back("1.weight", Placements{Shard(0), Replicate()});
  CHECK_THROWS_AS(fresh.distribute(mesh, bad), InvalidArgument);
  CHECK_FALSE(third->is_distributed());
  CHECK_NOTHROW(fresh.distribute(mesh));
}
