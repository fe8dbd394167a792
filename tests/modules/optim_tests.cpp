// Optimisers against torch.optim's documented algorithms, written here in
// f64 from the documentation's pseudo-code (not from the implementation):
// SGD with momentum, dampening, nesterov and weight decay; Adam with L2
// weight decay; AdamW with decoupled decay; amsgrad; RMSprop (centered,
// momentum, weight decay). Parameters sharded and replicated on 2 ranks,
// three steps with fixed gradients. Then parameter groups and their errors.
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

struct Param {
  std::vector<double> theta, buf, m, v, vmax;
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
    const std::vector<double> zeros(18, 0);
    Param ref{values(W), zeros, zeros, zeros, zeros};
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

DTENSOR_TEST_CASE("optim amsgrad matches torch.optim.Adam(amsgrad=True) and AdamW", "[optim]", 2) {
  for (const bool decoupled : {false, true}) {
    nn::AdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.1;
    o.amsgrad = true;
    check(
        decoupled ? "adamw amsgrad" : "adam amsgrad",
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
          r.vmax[i] = std::max(r.vmax[i], r.v[i]);
          const double mhat = r.m[i] / (1 - std::pow(o.beta1, t));
          const double vhat = r.vmax[i] / (1 - std::pow(o.beta2, t));
          r.theta[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
        });
  }
}

DTENSOR_TEST_CASE("optim RMSprop matches torch.optim.RMSprop", "[optim]", 2) {
  for (const bool centered : {false, true}) {
    nn::RMSpropOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.05;
    o.momentum = centered ? 0.9 : 0;
    o.centered = centered;
    // r.v: square_avg, r.m: grad_avg, r.buf: the momentum buffer (zeros at first).
    check(
        centered ? "rmsprop centered momentum" : "rmsprop plain",
        [&](nn::NamedParameters p) { return std::make_unique<nn::RMSprop>(p, o); },
        [&](Param& r, std::size_t i, double g, int) {
          g += o.weight_decay * r.theta[i];
          r.v[i] = o.alpha * r.v[i] + (1 - o.alpha) * g * g;
          double var = r.v[i];
          if (o.centered) {
            r.m[i] = o.alpha * r.m[i] + (1 - o.alpha) * g;
            var -= r.m[i] * r.m[i];
          }
          const double avg = std::sqrt(var) + o.eps;
          if (o.momentum > 0) {
            r.buf[i] = o.momentum * r.buf[i] + g / avg;
            r.theta[i] -= o.lr * r.buf[i];
          } else {
            r.theta[i] -= o.lr * g / avg;
          }
        });
  }
}

DTENSOR_TEST_CASE("optim parameter groups: own settings, set_lr, state names", "[optim]", 2) {
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Tensor W = Tensor::rand({4, 2}, DType::F64, 1);
  const Tensor G = Tensor::rand({4, 2}, DType::F64, 2);
  DTensor a = distribute_tensor(W, mesh, {Shard(0)}), b = distribute_tensor(W, mesh, {Replicate()});
  // Group 0 takes the options (lr 0.1, weight decay 0.5), group 1 its own.
  nn::SGD opt(std::vector<nn::ParamGroup>{{.params = {{"a", &a}}},
                                          {.params = {{"b", &b}}, .lr = 0.2, .weight_decay = 0.0}},
              {.lr = 0.1, .weight_decay = 0.5});
  CHECK(opt.num_param_groups() == 2);
  CHECK(opt.lrs() == std::vector<double>{0.1, 0.2});
  CHECK(opt.param_group_names(1) == std::vector<std::string>{"b"});
  for (int t = 0; t < 2; ++t) {
    a.set_grad(distribute_tensor(G, mesh, {Shard(0)}));
    b.set_grad(distribute_tensor(G, mesh, {Replicate()}));
    opt.step();
    if (t == 0) opt.set_lr(1, 0.4);  // the second step: group 1 at 0.4
  }
  const auto ga = values(a.full_tensor()), gb = values(b.full_tensor());
  for (std::size_t i = 0; i < 8; ++i) {
    double wa = W.item_flat(static_cast<std::int64_t>(i));
    const double g = G.item_flat(static_cast<std::int64_t>(i));
    for (int t = 0; t < 2; ++t)
      wa -= 0.1 * (g + 0.5 * wa);
    CHECK(std::abs(ga[i] - wa) <= 1e-15);
    CHECK(std::abs(gb[i] - (W.item_flat(static_cast<std::int64_t>(i)) - 0.2 * g - 0.4 * g)) <=
          1e-15);
  }
  opt.set_lr(0.3);
  CHECK(opt.lrs() == std::vector<double>{0.3, 0.3});

  // The state keys stay optim.<param>.<buffer> whatever the group.
  nn::Adam adam(std::vector<nn::ParamGroup>{{.params = {{"a", &a}}}, {.params = {{"b", &b}}}},
                {.amsgrad = true});
  std::vector<std::string> names;
  for (const auto& [name, t] : adam.state_dict())
    names.push_back(name);
  CHECK(names == std::vector<std::string>{"optim.a.exp_avg", "optim.a.exp_avg_sq",
                                          "optim.a.max_exp_avg_sq", "optim.b.exp_avg",
                                          "optim.b.exp_avg_sq", "optim.b.max_exp_avg_sq",
                                          "optim.step"});
  nn::RMSprop rms({{"a", &a}}, {.momentum = 0.9, .centered = true});
  names.clear();
  for (const auto& [name, t] : rms.state_dict())
    names.push_back(name);
  CHECK(names == std::vector<std::string>{"optim.a.square_avg", "optim.a.momentum_buffer",
                                          "optim.a.grad_avg", "optim.step"});

  // Errors name the group and the setting.
  using Catch::Contains;
  CHECK_THROWS_WITH(
      nn::Adam(std::vector<nn::ParamGroup>{{.params = {{"a", &a}}, .momentum = 0.9}}, {}),
      Contains("param group 0: momentum is not a setting of Adam"));
  CHECK_THROWS_WITH(nn::SGD(std::vector<nn::ParamGroup>{{.params = {{"a", &a}}, .beta1 = 0.9}}, {}),
                    Contains("beta1 / beta2 are not settings of SGD"));
  CHECK_THROWS_WITH(
      nn::SGD(std::vector<nn::ParamGroup>{{.params = {{"a", &a}}}, {.params = {{"a2", &a}}}}, {}),
      Contains("a2: the parameter is given twice"));
  CHECK_THROWS_WITH(nn::SGD(std::vector<nn::ParamGroup>{{.params = {{"a", &a}}, .lr = -1.0}}, {}),
                    Contains("param group 0: lr -1 is negative"));
  CHECK_THROWS_WITH(opt.set_lr(5, 0.1), Contains("param group 5"));
  opt.param_group(1).momentum = -1;
  CHECK_THROWS_WITH(opt.step(), Contains("param group 1: momentum -1 is negative"));
}
