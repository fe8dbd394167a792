// Optimisers against torch.optim's documented algorithms, written here in
// f64 from the documentation's pseudo-code (not from the implementation):
// SGD with momentum, dampening, nesterov and weight decay; Adam with L2
// weight decay; AdamW with decoupled decay. Parameters sharded and
// replicated on 2 ranks, three steps with fixed gradients.
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

struct Param {
  std::vector<double> theta, buf, m, v;
};

std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out.push_back(t.item_flat(i));
  return out;
}

// Runs `make(params)` for 3 steps with gradients g_t = G * (t + 1) and
// compares with `oracle(theta, g, t)` applied element-wise.
template <class Make, class Oracle>
void check(const char* what, Make make, Oracle oracle) {
  INFO(what);
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor W = Tensor::rand({6, 3}, DType::F64, 1);
  const Tensor G = Tensor::rand({6, 3}, DType::F64, 2);
  for (const Placements& pl : {Placements{Shard(0)}, Placements{Replicate()}}) {
    DTensor w = distribute_tensor(W, mesh, pl);
    w.requires_grad_();
    auto opt = make(nn::NamedParameters{{"w", &w}});
    Param ref{values(W), std::vector<double>(18, 0), std::vector<double>(18, 0),
              std::vector<double>(18, 0)};
    for (int t = 1; t <= 3; ++t) {
      Tensor g = G.clone();
      for (std::int64_t i = 0; i < g.numel(); ++i)
        g.data<double>()[i] *= t;
      w.set_grad(distribute_tensor(g, mesh, pl));
      opt->step();
      for (std::size_t i = 0; i < 18; ++i)
        oracle(ref, i, g.item_flat(static_cast<std::int64_t>(i)), t);
    }
    const auto got = values(w.full_tensor());
    for (std::size_t i = 0; i < 18; ++i)
      CHECK(std::abs(got[i] - ref.theta[i]) <= 1e-13 * (1 + std::abs(ref.theta[i])));
    // State placed like the parameter, under torch's names.
    for (const auto& [name, s] : opt->state_dict())
      if (name != "optim.step") {
        CHECK(name.rfind("optim.w.", 0) == 0);
        CHECK(s.placements() == pl);
      }
  }
}

}  // namespace

DTENSOR_TEST_CASE("optim SGD matches torch.optim.SGD", "[optim]", 2) {
  for (const bool nesterov : {false, true}) {
    nn::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.dampening = nesterov ? 0 : 0.3;
    o.weight_decay = 0.01;
    o.nesterov = nesterov;
    check(
        nesterov ? "sgd nesterov" : "sgd dampening",
        [&](nn::NamedParameters p) { return std::make_unique<nn::SGD>(p, o); },
        [&](Param& r, std::size_t i, double g, int t) {
          g += o.weight_decay * r.theta[i];
          r.buf[i] = t == 1 ? g : o.momentum * r.buf[i] + (1 - o.dampening) * g;
          const double d = o.nesterov ? g + o.momentum * r.buf[i] : r.buf[i];
          r.theta[i] -= o.lr * d;
        });
  }
  nn::SGDOptions plain;
  plain.lr = 0.2;
  check(
      "sgd plain", [&](nn::NamedParameters p) { return std::make_unique<nn::SGD>(p, plain); },
      [&](Param& r, std::size_t i, double g, int) { r.theta[i] -= plain.lr * g; });
}

DTENSOR_TEST_CASE("optim Adam and AdamW match torch.optim", "[optim]", 2) {
  for (const bool decoupled : {false, true}) {
    nn::AdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.1;
    check(
        decoupled ? "adamw" : "adam",
        [&](nn::NamedParameters p) -> std::unique_ptr<nn::Optimizer> {
          if (decoupled) return std::make_unique<nn::AdamW>(p, o);
          return std::make_unique<nn::Adam>(p, o);
        },
        [&](Param& r, std::size_t i, double g, int t) {
          if (decoupled)
            r.theta[i] *= 1 - o.lr * o.weight_decay;
          else
            g += o.weight_decay * r.theta[i];
          r.m[i] = o.beta1 * r.m[i] + (1 - o.beta1) * g;
          r.v[i] = o.beta2 * r.v[i] + (1 - o.beta2) * g * g;
          const double mhat = r.m[i] / (1 - std::pow(o.beta1, t));
          const double vhat = r.v[i] / (1 - std::pow(o.beta2, t));
          r.theta[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
        });
  }
}

DTENSOR_TEST_CASE("optim state round trips through state_dict", "[optim]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor W = Tensor::rand({4, 2}, DType::F64, 1);
  DTensor a = distribute_tensor(W, mesh, {Shard(0)}), b = distribute_tensor(W, mesh, {Shard(0)});
  a.requires_grad_();
  b.requires_grad_();
  nn::Adam oa({{"w", &a}}, {}), ob({{"w", &b}}, {});
  const DTensor g = distribute_tensor(Tensor::rand({4, 2}, DType::F64, 2), mesh, {Shard(0)});
  a.set_grad(g);
  oa.step();
  b.set_grad(g);
  ob.step();
  auto state = oa.state_dict();
  CHECK(state.size() == 3);  // exp_avg, exp_avg_sq, step
  nn::Adam oc({{"w", &b}}, {});
  oc.load_state_dict(state);
  CHECK(oc.steps_taken() == 1);
  a.set_grad(g);
  oa.step();
  b.set_grad(g);
  oc.step();
  CHECK(max_abs_diff(a.full_tensor(), b.full_tensor()) == 0);
  state.emplace_back("optim.v.exp_avg", state.front().second);
  CHECK_THROWS_WITH(oc.load_state_dict(state), Catch::Contains("unexpected [optim.v.exp_avg]"));
}

DTENSOR_TEST_CASE("optim AdamW keeps weight_decay 1e-2 under designated initialisers", "[optim]",
                  1) {
  // With a zero gradient the moments stay 0 and the update is the decay
  // alone: theta * (1 - lr * 1e-2), torch.optim.AdamW's default.
  DeviceMesh mesh(DeviceType::CPU, {1});
  const Tensor W = Tensor::rand({3, 2}, DType::F64, 1);
  DTensor w = distribute_tensor(W, mesh, {Replicate()});
  nn::AdamW opt({{"w", &w}}, {.lr = 0.1});
  w.set_grad(distribute_tensor(Tensor::zeros({3, 2}, DType::F64), mesh, {Replicate()}));
  opt.step();
  const auto got = values(w.full_tensor());
  for (std::int64_t i = 0; i < W.numel(); ++i)
    CHECK(got[static_cast<std::size_t>(i)] == W.item_flat(i) * (1 - 0.1 * 1e-2));
  // AdamOptions are taken as given (weight_decay 0 unless set).
  nn::AdamOptions plain;
  plain.lr = 0.1;
  DTensor u = distribute_tensor(W, mesh, {Replicate()});
  nn::AdamW as_given({{"u", &u}}, plain);
  u.set_grad(distribute_tensor(Tensor::zeros({3, 2}, DType::F64), mesh, {Replicate()}));
  as_given.step();
  CHECK(max_abs_diff(u.full_tensor(), W) == 0);
}
