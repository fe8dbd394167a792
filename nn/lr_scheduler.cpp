#include "dtensor/nn/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "dtensor/core/errors.h"

namespace dtensor::nn {
namespace {

constexpr const char* kComponent = "lr_scheduler";
constexpr double kPi = std::numbers::pi;

}  // namespace

// ---- the base ----

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (std::size_t i = 0; i < opt.num_param_groups(); ++i) {
    ParamGroupSettings& g = opt.param_group(i);
    if (!g.initial_lr) g.initial_lr = g.lr;  // group.setdefault('initial_lr', group['lr'])
    base_lrs_.push_back(*g.initial_lr);
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  for (std::size_t i = 0; i < lrs.size(); ++i)
    opt_.param_group(i).lr = lrs[i];
  last_lr_ = opt_.lrs();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(std::int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  const auto closed = closed_form_lr();
  apply(closed ? *closed : get_lr());
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& opt, std::int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  check_arg(step_size >= 1, kComponent, "StepLR: step_size {} must be >= 1", step_size);
  check_arg(std::isfinite(gamma) && gamma >= 0, kComponent,
            "StepLR: gamma {} must be finite and >= 0", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs)
    lr = lr * gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  // Python's last_epoch // step_size (last_epoch >= 0: C++'s division).
  const std::int64_t decays = last_epoch_ / step_size_;
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(base * std::pow(gamma_, static_cast<double>(decays)));
  return lrs;
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, std::int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  check_arg(t_max >= 1, kComponent, "CosineAnnealingLR: t_max {} must be >= 1", t_max);
  check_arg(std::isfinite(eta_min) && eta_min >= 0, kComponent,
            "CosineAnnealingLR: eta_min {} must be finite and >= 0", eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  // torch's three branches, in its order of operations.
  std::vector<double> lrs = group_lrs();
  const auto T = static_cast<double>(t_max_);
  const auto e = static_cast<double>(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  for (std::size_t i = 0; i < lrs.size(); ++i) {
    const double base = base_lrs_[i];
    if (step_count_ == 1 && last_epoch_ > 0)
      lrs[i] = eta_min_ + (base - eta_min_) * (1 + std::cos(e * kPi / T)) / 2;
    else if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0)
      lrs[i] = lrs[i] + (base - eta_min_) * (1 - std::cos(kPi / T)) / 2;
    else
      lrs[i] =
          (1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lrs[i] - eta_min_) +
          eta_min_;
  }
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) *
                                 (1 + std::cos(kPi * static_cast<double>(last_epoch_) /
                                               static_cast<double>(t_max_))) /
                                 2);
  return lrs;
}

// ---- LinearLR ----

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, std::int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_iters_(total_iters) {
  // start_factor 0 would divide by zero in the recursion (torch 2 refuses it too).
  check_arg(start_factor > 0 && start_factor <= 1, kComponent,
            "LinearLR: start_factor {} must be in (0, 1]", start_factor);
  check_arg(end_factor >= 0 && end_factor <= 1, kComponent,
            "LinearLR: end_factor {} must be in [0, 1]", end_factor);
  check_arg(total_iters >= 1, kComponent, "LinearLR: total_iters {} must be >= 1", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs)
      lr = lr * start_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double factor =
      1. + (end_ - start_) / (static_cast<double>(total_iters_) * start_ +
                              static_cast<double>(last_epoch_ - 1) * (end_ - start_));
  for (double& lr : lrs)
    lr = lr * factor;
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  std::vector<double> lrs;
  const auto done = static_cast<double>(std::min(total_iters_, last_epoch_));
  for (double base : base_lrs_)
    lrs.push_back(base * (start_ + (end_ - start_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

// ---- OneCycleLR ----

Optimizer& OneCycleLR::prepare(Optimizer& opt, const std::vector<double>& max_lr,
                               std::int64_t total_steps, const OneCycleLROptions& o) {
  const std::size_t groups = opt.num_param_groups();
  check_arg(total_steps >= 1, kComponent, "OneCycleLR: total_steps {} must be >= 1", total_steps);
  DTENSOR_CHECK_ARG(max_lr.size() == 1 || max_lr.size() == groups, kComponent,
                    "OneCycleLR: max_lr has {} values for {} param groups", max_lr.size(), groups);
  for (double m : max_lr)
    check_arg(std::isfinite(m) && m >= 0, kComponent, "OneCycleLR: max_lr {} must be >= 0", m);
  check_arg(o.pct_start >= 0 && o.pct_start <= 1, kComponent,
            "OneCycleLR: pct_start {} must be in [0, 1]", o.pct_start);
  check_arg(o.div_factor > 0, kComponent, "OneCycleLR: div_factor {} must be > 0", o.div_factor);
  check_arg(o.final_div_factor > 0, kComponent, "OneCycleLR: final_div_factor {} must be > 0",
            o.final_div_factor);
  check_arg(!o.cycle_momentum || opt.has_momentum() || opt.has_betas(), kComponent,
            "OneCycleLR: cycle_momentum needs an optimiser with a momentum or betas");
  for (std::size_t i = 0; i < groups; ++i) {
    ParamGroupSettings& g = opt.param_group(i);
    g.initial_lr = max_lr[max_lr.size() == 1 ? 0 : i] / o.div_factor;
    if (o.cycle_momentum) (opt.has_betas() ? g.beta1 : g.momentum) = o.max_momentum;
  }
  return opt;
}

OneCycleLR::OneCycleLR(Optimizer& opt, std::vector<double> max_lr, std::int64_t total_steps,
                       OneCycleLROptions o)
    : LRScheduler(prepare(opt, max_lr, total_steps, o)), total_steps_(total_steps), o_(o) {
  const auto total = static_cast<double>(total_steps);
  // torch's phases. lr: 0 initial_lr, 1 max_lr, 2 min_lr; momentum: 1
  // base_momentum, 2 max_momentum.
  if (o.three_phase)
    phases_ = {{o.pct_start * total - 1, 0, 1, 2, 1},
               {2 * o.pct_start * total - 2, 1, 0, 1, 2},
               {total - 1, 0, 2, 2, 2}};
  else
    phases_ = {{o.pct_start * total - 1, 0, 1, 2, 1}, {total - 1, 1, 2, 1, 2}};
  for (std::size_t i = 0; i < opt.num_param_groups(); ++i) {
    initial_lr_.push_back(*opt.param_group(i).initial_lr);
    max_lr_.push_back(max_lr[max_lr.size() == 1 ? 0 : i]);
    min_lr_.push_back(initial_lr_.back() / o.final_div_factor);
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (o_.anneal_strategy == OneCycleLROptions::Anneal::Linear) return (end - start) * pct + start;
  const double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr() {
  check_arg(last_epoch_ <= total_steps_, kComponent, "OneCycleLR: step {} is past total_steps {}",
            last_epoch_ + 1, total_steps_);
  const auto step = static_cast<double>(last_epoch_);
  std::vector<double> lrs;
  for (std::size_t i = 0; i < opt_.num_param_groups(); ++i) {
    const double lr_at[3] = {initial_lr_[i], max_lr_[i], min_lr_[i]};
    const double momentum_at[3] = {0, o_.base_momentum, o_.max_momentum};
    double start_step = 0, lr = 0, momentum = 0;
    for (std::size_t k = 0; k < phases_.size(); ++k) {
      const Phase& p = phases_[k];
      if (step <= p.end_step || k + 1 == phases_.size()) {
        // A phase of no steps (pct_start * total_steps < 1) is 0 / 0 in torch
        // (ZeroDivisionError).
        check_arg(p.end_step != start_step, kComponent,
                  "OneCycleLR: pct_start {} leaves a phase of total_steps {} without steps",
                  o_.pct_start, total_steps_);
        const double pct = (step - start_step) / (p.end_step - start_step);
        lr = anneal(lr_at[p.start_lr], lr_at[p.end_lr], pct);
        momentum = anneal(momentum_at[p.start_momentum], momentum_at[p.end_momentum], pct);
        break;
      }
      start_step = p.end_step;
    }
    lrs.push_back(lr);
    if (o_.cycle_momentum)
      (opt_.has_betas() ? opt_.param_group(i).beta1 : opt_.param_group(i).momentum) = momentum;
  }
  return lrs;
}

// ---- SequentialLR ----

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<std::int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  check_arg(!schedulers_.empty(), kComponent, "SequentialLR: schedulers is empty");
  for (std::size_t i = 0; i < schedulers_.size(); ++i)
    check_arg(schedulers_[i] != nullptr && &schedulers_[i]->opt_ == &opt, kComponent,
              "SequentialLR: schedulers[{}] does not drive this optimiser", i);
  DTENSOR_CHECK_ARG(
      milestones_.size() + 1 == schedulers_.size(), kComponent,
      "SequentialLR: milestones has {} entries for {} schedulers (one fewer expected)",
      milestones_.size(), schedulers_.size());
  check_arg(std::is_sorted(milestones_.begin(), milestones_.end()), kComponent,
            "SequentialLR: milestones must be increasing");
  last_epoch_ = 0;
  // Back to the initial lrs; undo each scheduler's first step and take the
  // first scheduler's again.
  for (std::size_t i = 0; i < opt.num_param_groups(); ++i)
    opt.param_group(i).lr = *opt.param_group(i).initial_lr;
  for (auto& s : schedulers_)
    --s->last_epoch_;
  schedulers_.front()->initial_step();
  last_lr_ = schedulers_.front()->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const auto idx = static_cast<std::size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_)
    s.step_to(0);
  else
    s.step();
  last_lr_ = s.get_last_lr();
}

}  // namespace dtensor::nn
