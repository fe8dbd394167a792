// Resuming an optimiser from a checkpoint with the documented idiom,
//   opt.load_state_dict(load_checkpoint(dir, checkpoint_targets(opt.state_dict())))
// on a fresh optimiser, continues exactly as the unbroken run does (the
// oracle: the same optimiser stepping on without a checkpoint), and
// load_state_dict refuses a state that lacks what the settings need.
#include <functional>
#include <memory>

#include "dtensor/testing.h"
#include "tests/checkpoint/checkpoint_test_support.h"

using namespace dtensor;
using dtensor::testing::SharedTempDir;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<nn::Optimizer>(nn::NamedParameters)>;

// Gradient of step t (from 1): a fixed random tensor times t.
DTensor gradient(const DeviceMesh& mesh, int t) {
  Tensor g = Tensor::rand({6, 3}, DType::F64, 2);
  for (std::int64_t i = 0; i < g.numel(); ++i)
    g.data<double>()[i] *= t;
  return distribute_tensor(g, mesh, {Shard(0)});
}

void step(nn::Optimizer& opt, DTensor& w, const DeviceMesh& mesh, int t) {
  w.set_grad(gradient(mesh, t));
  opt.step();
}

// 4 unbroken steps against 2 steps, a checkpoint, a fresh optimiser loaded
// with the idiom, 2 more steps: the parameters agree bit for bit. Resumes
// after `saved_after` steps (0: the checkpoint holds the initial state).
void check_resume(const char* what, const MakeOptimizer& make, int saved_after) {
  INFO(what << ", saved after step " << saved_after);
  const DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor W = Tensor::rand({6, 3}, DType::F64, 1);
  DTensor unbroken = distribute_tensor(W, mesh, {Shard(0)});
  DTensor resumed = distribute_tensor(W, mesh, {Shard(0)});
  auto a = make({{"w", &unbroken}});
  for (int t = 1; t <= 4; ++t)
    step(*a, unbroken, mesh, t);

  const SharedTempDir dir("optim-resume");
  {
    auto first = make({{"w", &resumed}});
    for (int t = 1; t <= saved_after; ++t)
      step(*first, resumed, mesh, t);
    save_checkpoint(first->state_dict(), dir.path());
  }
  auto second = make({{"w", &resumed}});
  second->load_state_dict(load_checkpoint(dir.path(), checkpoint_targets(second->state_dict())));
  REQUIRE(second->steps_taken() == saved_after);
  for (int t = saved_after + 1; t <= 4; ++t)
    step(*second, resumed, mesh, t);
  CHECK(max_abs_diff(unbroken.full_tensor(), resumed.full_tensor()) == 0);
}

nn::SGDOptions momentum_sgd() {
  nn::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.dampening = 0.3;  // the first step copies the gradient: a zero buffer would not
  return o;
}

}  // namespace

DTENSOR_TEST_CASE("optim resumes from a checkpoint with checkpoint_targets(state_dict())",
                  "[optim][checkpoint]", 2) {
  nn::AdamOptions adam;
  adam.lr = 0.01;
  for (const int saved_after : {0, 2}) {
    check_resume(
        "adam", [&](nn::NamedParameters p) { return std::make_unique<nn::Adam>(p, adam); },
        saved_after);
    check_resume(
        "sgd momentum",
        [&](nn::NamedParameters p) { return std::make_unique<nn::SGD>(p, momentum_sgd()); },
        saved_after);
  }
}

DTENSOR_TEST_CASE("optim load_state_dict names the state the settings need", "[optim][checkpoint]",
                  2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  DTensor w = distribute_tensor(Tensor::rand({6, 3}, DType::F64, 1), mesh, {Shard(0)});
  DTensor v = distribute_tensor(Tensor::rand({6, 3}, DType::F64, 3), mesh, {Shard(0)});
  nn::Adam adam({{"w", &w}, {"v", &v}}, {});
  step(adam, w, mesh, 1);
  step(adam, w, mesh, 2);
  nn::NamedDTensors only_step;
  for (const auto& e : adam.state_dict())
    if (e.first == "optim.step") only_step.push_back(e);
  nn::Adam fresh({{"w", &w}, {"v", &v}}, {});
  CHECK_THROWS_AS(fresh.load_state_dict(only_step), InvalidArgument);
  CHECK_THROWS_WITH(fresh.load_state_dict(only_step),
                    Catch::Contains("missing [optim.w.exp_avg, optim.w.exp_avg_sq, "
                                    "optim.v.exp_avg, optim.v.exp_avg_sq]"));
  CHECK(fresh.steps_taken() == 0);  // nothing loaded from a refused state

  nn::SGD sgd({{"w", &w}}, momentum_sgd());
  step(sgd, w, mesh, 1);
  nn::NamedDTensors no_buffer;
  for (const auto& e : sgd.state_dict())
    if (e.first == "optim.step") no_buffer.push_back(e);
  nn::SGD fresh_sgd({{"w", &w}}, momentum_sgd());
  CHECK_THROWS_WITH(fresh_sgd.load_state_dict(no_buffer),
                    Catch::Contains("missing [optim.w.momentum_buffer]"));
  CHECK_THROWS_WITH(fresh_sgd.load_state_dict({}), Catch::Contains("missing [optim.step"));

  // Before the first step nothing but the step count is needed.
  nn::SGD unstepped({{"w", &w}}, momentum_sgd());
  nn::NamedDTensors step0;
  for (const auto& e : unstepped.state_dict())
    if (e.first == "optim.step") step0.push_back(e);
  CHECK_NOTHROW(fresh_sgd.load_state_dict(step0));
  // Plain SGD has no state to lose.
  nn::SGDOptions plain;
  nn::SGD plain_sgd({{"w", &w}}, plain);
  step(plain_sgd, w, mesh, 1);
  CHECK(plain_sgd.state_dict().size() == 1);
  nn::SGD plain_fresh({{"w", &w}}, plain);
  CHECK_NOTHROW(plain_fresh.load_state_dict(plain_sgd.state_dict()));
  CHECK(plain_fresh.steps_taken() == 1);
}
