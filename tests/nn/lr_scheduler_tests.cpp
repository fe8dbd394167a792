// The learning-rate schedulers against their closed forms, computed here
// (to rounding: torch's chainable forms are recursions), and against values
// printed by PyTorch 1.13 for the recursions whose last bits matter
// (CosineAnnealingLR, OneCycleLR, SequentialLR: equal to the bit). Also
// parameter groups, OneCycleLR's momentum, and the error messages.
#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>

#include "dtensor/nn/lr_scheduler.h"

using namespace dtensor;
using Catch::Contains;

namespace {

// An optimiser with one group per lr and no parameters: the schedulers only
// read and write the groups' settings.
nn::SGD sgd(const std::vector<double>& lrs) {
  std::vector<nn::ParamGroup> groups;
  for (double lr : lrs)
    groups.push_back({.params = {}, .lr = lr});
  return nn::SGD(groups, {.lr = lrs.front(), .momentum = 0.9});
}

// lr after each of `steps` steps (element 0: after construction), group g.
template <class S>
std::vector<double> trace(nn::Optimizer& opt, S& sched, int steps, std::size_t g = 0) {
  std::vector<double> out{opt.lr(g)};
  for (int i = 0; i < steps; ++i) {
    opt.step();
    sched.step();
    out.push_back(opt.lr(g));
    CHECK(sched.get_last_lr() == opt.lrs());
  }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("epoch " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

constexpr double kPi = std::numbers::pi;

}  // namespace

TEST_CASE("lr_scheduler StepLR decays every step_size epochs, per group", "[lr_scheduler]") {
  auto opt = sgd({0.1, 0.4});
  nn::StepLR s(opt, 3, 0.3);
  const auto lr0 = trace(opt, s, 10, 0);
  std::vector<double> want0, want1;
  for (int e = 0; e <= 10; ++e) {
    want0.push_back(0.1 * std::pow(0.3, e / 3));
    want1.push_back(0.4 * std::pow(0.3, e / 3));
  }
  check_close(lr0, want0, 1e-15);
  CHECK(std::abs(opt.lr(1) - want1.back()) <= 1e-15);
  CHECK(s.base_lrs() == std::vector<double>{0.1, 0.4});
}

TEST_CASE("lr_scheduler CosineAnnealingLR is torch's recursion", "[lr_scheduler]") {
  auto opt = sgd({0.1, 0.2});
  nn::CosineAnnealingLR s(opt, 5, 0.01);
  std::vector<double> lr0{opt.lr(0)}, lr1{opt.lr(1)};
  for (int i = 0; i < 12; ++i) {
    opt.step();
    s.step();
    lr0.push_back(opt.lr(0));
    lr1.push_back(opt.lr(1));
  }
  // The closed form, to rounding, past t_max (the lr climbs back up).
  std::vector<double> closed;
  for (int e = 0; e <= 12; ++e)
    closed.push_back(0.01 + (0.1 - 0.01) * (1 + std::cos(kPi * e / 5)) / 2);
  check_close(lr0, closed, 1e-15);
  // torch 1.13, to the bit (the recursion drifts from the closed form).
  const std::vector<double> torch0{0.10000000000000001,  0.091405764746872634, 0.068905764746872628,
                                   0.041094235253127359, 0.018594235253127367, 0.01,
                                   0.018594235253127367, 0.041094235253127387, 0.068905764746872669,
                                   0.091405764746872689, 0.10000000000000006,  0.091405764746872717,
                                   0.068905764746872683};
  const std::vector<double> torch1{0.20000000000000001,  0.18185661446562001,  0.13435661446562,
                                   0.075643385534379992, 0.028143385534379999, 0.01,
                                   0.028143385534379992, 0.075643385534380006, 0.13435661446562006,
                                   0.1818566144656201,   0.20000000000000009,  0.18185661446562015,
                                   0.13435661446562008};
  CHECK(lr0 == torch0);
  CHECK(lr1 == torch1);
}

TEST_CASE("lr_scheduler LinearLR ramps the factor", "[lr_scheduler]") {
  auto opt = sgd({0.1});
  nn::LinearLR s(opt, 0.25, 1.0, 4);
  std::vector<double> want;
  for (int e = 0; e <= 6; ++e)
    want.push_back(0.1 * (0.25 + 0.75 * std::min(e, 4) / 4.0));
  check_close(trace(opt, s, 6), want, 1e-15);
}

TEST_CASE("lr_scheduler OneCycleLR: lr and momentum by phase", "[lr_scheduler]") {
  auto opt = sgd({0.1});
  nn::OneCycleLR s(opt, 1.0, 10);
  std::vector<double> lrs{opt.lr()}, moms{opt.param_group(0).momentum};
  for (int i = 0; i < 9; ++i) {
    opt.step();
    s.step();
    lrs.push_back(opt.lr());
    moms.push_back(opt.param_group(0).momentum);
  }
  // Closed form: phase 1 over steps [0, 2] from 1/25 to 1 (momentum 0.95 to
  // 0.85), phase 2 over [2, 9] to 1/25/1e4 (momentum back to 0.95).
  const auto cos_anneal = [](double a, double b, double pct) {
    return b + (a - b) / 2 * (std::cos(kPi * pct) + 1);
  };
  std::vector<double> want_lr, want_mom;
  for (int k = 0; k <= 9; ++k) {
    const bool up = k <= 2;
    const double pct = up ? k / 2.0 : (k - 2) / 7.0;
    want_lr.push_back(up ? cos_anneal(0.04, 1.0, pct) : cos_anneal(1.0, 0.04 / 1e4, pct));
    want_mom.push_back(up ? cos_anneal(0.95, 0.85, pct) : cos_anneal(0.85, 0.95, pct));
  }
  check_close(lrs, want_lr, 1e-15);
  check_close(moms, want_mom, 1e-15);
  const std::vector<double> torch_lr{
      0.040000000000000036,  0.52000000000000002, 1,
      0.95048463201347366,   0.81174565394976306, 0.61126202193628931,
      0.38874197806371075,   0.18825834605023697, 0.049519367986526286,
      3.9999999999999998e-06};
  CHECK(lrs == torch_lr);
  // As torch: one step more is allowed (last_epoch == total_steps), the next is not.
  s.step();
  CHECK_THROWS_WITH(s.step(), Contains("past total_steps 10"));
  // Adam cycles beta1.
  nn::Adam adam(std::vector<nn::ParamGroup>{{}}, {.lr = 0.1});
  nn::OneCycleLR a(adam, 1.0, 10);
  CHECK(adam.param_group(0).beta1 == 0.95);
}

TEST_CASE("lr_scheduler SequentialLR restarts at the milestone as torch does", "[lr_scheduler]") {
  auto opt = sgd({0.1});
  auto warm = std::make_shared<nn::LinearLR>(opt, 0.5, 1.0, 2);
  auto decay = std::make_shared<nn::StepLR>(opt, 2, 0.3);
  nn::SequentialLR s(opt, {warm, decay}, {3});
  const std::vector<double> torch{
      0.050000000000000003, 0.075000000000000011,  0.10000000000000001,
      0.10000000000000001,  0.10000000000000001,   0.029999999999999999,
      0.029999999999999999, 0.0089999999999999993, 0.0089999999999999993};
  CHECK(trace(opt, s, 8) == torch);
}

TEST_CASE("lr_scheduler and set_lr: bad arguments name the parameter", "[lr_scheduler]") {
  auto opt = sgd({0.1});
  CHECK_THROWS_AS(nn::StepLR(opt, 0), InvalidArgument);
  CHECK_THROWS_WITH(nn::StepLR(opt, 0), Contains("step_size 0"));
  CHECK_THROWS_WITH(nn::StepLR(opt, 2, -1), Contains("gamma"));
  CHECK_THROWS_WITH(nn::CosineAnnealingLR(opt, 0), Contains("t_max 0"));
  CHECK_THROWS_WITH(nn::LinearLR(opt, 1.5), Contains("start_factor 1.5"));
  CHECK_THROWS_WITH(nn::LinearLR(opt, 0.5, 2.0), Contains("end_factor 2"));
  CHECK_THROWS_WITH(nn::LinearLR(opt, 0.5, 1.0, 0), Contains("total_iters 0"));
  CHECK_THROWS_WITH(nn::OneCycleLR(opt, 1.0, 0), Contains("total_steps 0"));
  CHECK_THROWS_WITH(nn::OneCycleLR(opt, {1.0, 2.0}, 10), Contains("max_lr has 2 values"));
  CHECK_THROWS_WITH(nn::OneCycleLR(opt, 1.0, 10, {.pct_start = 1.5}), Contains("pct_start"));
  auto a = std::make_shared<nn::StepLR>(opt, 2);
  CHECK_THROWS_WITH(nn::SequentialLR(opt, {a}, {3}), Contains("milestones has 1 entries"));
  auto other = sgd({0.1});
  auto b = std::make_shared<nn::StepLR>(other, 2);
  CHECK_THROWS_WITH(nn::SequentialLR(opt, {a, b}, {3}), Contains("schedulers[1]"));
  CHECK_THROWS_WITH(opt.set_lr(-1.0), Contains("lr"));
  CHECK_THROWS_AS(opt.set_lr(std::nan("")), InvalidArgument);
  opt.set_lr(0.5);
  CHECK(opt.lrs() == std::vector<double>{0.5});
}
