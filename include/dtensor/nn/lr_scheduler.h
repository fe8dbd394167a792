// Learning-rate schedulers with torch.optim.lr_scheduler's arithmetic, value
// for value: StepLR, CosineAnnealingLR, LinearLR, OneCycleLR and
// SequentialLR. Each writes the lr of every parameter group of its
// optimiser (Optimizer::param_group(i).lr), as torch's write
// group['lr'].
//
// As in torch: constructing a scheduler performs its first step (epoch 0:
// LinearLR multiplies the lr by start_factor at once), and step() belongs
// after each optimiser step. The chainable schedulers compute the next lr
// from the group's current one (torch's get_lr, a recursion: the cosine's
// recursive form differs from its closed form in the last bits, and an lr
// set by hand between steps carries on), SequentialLR restarts a scheduler
// at its milestone with the closed form, as torch's step(0) does. The first
// scheduler made for an optimiser records each group's lr as its
// initial_lr; later ones (SequentialLR's parts) start from that.
//
// Bad arguments are InvalidArgument naming the parameter ("[dtensor.lr_scheduler]
// StepLR: step_size 0 must be >= 1").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dtensor/nn/optim.h"

namespace dtensor::nn {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// One epoch (or iteration) on: sets every group's lr.
  virtual void step();
  /// The lrs the last step set, one per group (torch's get_last_lr()).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// Steps taken since construction (0 right after it).
  std::int64_t last_epoch() const { return last_epoch_; }
  /// Each group's initial_lr when the scheduler was made.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return opt_; }

 protected:
  /// Records each group's initial_lr (the lr, unless an earlier scheduler
  /// did) and base_lrs. The derived constructor calls initial_step() last.
  explicit LRScheduler(Optimizer& opt);
  /// torch's _initial_step: the step to epoch 0.
  void initial_step();
  /// torch's step(epoch) (SequentialLR's restart at a milestone): the closed
  /// form where the scheduler has one, else get_lr().
  void step_to(std::int64_t epoch);
  /// The lrs for last_epoch_ (already advanced), from the groups' current ones.
  virtual std::vector<double> get_lr() = 0;
  /// The lrs for last_epoch_ from base_lrs alone, where there is such a form.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  /// Each group's current lr.
  std::vector<double> group_lrs() const { return opt_.lrs(); }

  Optimizer& opt_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  std::int64_t last_epoch_ = -1;
  std::int64_t step_count_ = 0;  // torch's _step_count: steps including the initial one

 private:
  void apply(const std::vector<double>& lrs);
  friend class SequentialLR;
};

/// torch.optim.lr_scheduler.StepLR: lr *= gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, std::int64_t step_size, double gamma = 0.1);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  std::int64_t step_size_;
  double gamma_;
};

/// torch.optim.lr_scheduler.CosineAnnealingLR: from the base lr down to
/// eta_min over t_max epochs (and back up over the next t_max, and so on).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, std::int64_t t_max, double eta_min = 0);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  std::int64_t t_max_;
  double eta_min_;
};

/// torch.optim.lr_scheduler.LinearLR: the factor of the base lr goes
/// linearly from start_factor to end_factor over total_iters epochs.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0,
           std::int64_t total_iters = 5);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  double start_, end_;
  std::int64_t total_iters_;
};

struct OneCycleLROptions {
  double pct_start = 0.3;  // the share of the steps spent increasing the lr
  enum class Anneal { Cos, Linear } anneal_strategy = Anneal::Cos;
  /// Cycle each group's momentum (SGD, RMSprop) or beta1 (Adam, AdamW)
  /// inversely to the lr, between base_momentum and max_momentum.
  bool cycle_momentum = true;
  double base_momentum = 0.85, max_momentum = 0.95;
  double div_factor = 25;         // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};

/// torch.optim.lr_scheduler.OneCycleLR over total_steps steps (a step after
/// the last one is an InvalidArgument, as torch's ValueError). max_lr: one
/// value for every group, or one per group.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, std::vector<double> max_lr, std::int64_t total_steps,
             OneCycleLROptions options = {});
  OneCycleLR(Optimizer& opt, double max_lr, std::int64_t total_steps,
             OneCycleLROptions options = {})
      : OneCycleLR(opt, std::vector<double>{max_lr}, total_steps, options) {}

 private:
  /// Checks the arguments and sets each group's initial_lr (and momentum)
  /// before the base records them, as torch does.
  static Optimizer& prepare(Optimizer& opt, const std::vector<double>& max_lr,
                            std::int64_t total_steps, const OneCycleLROptions& o);
  std::vector<double> get_lr() override;
  double anneal(double start, double end, double pct) const;

  struct Phase {
    double end_step;
    int start_lr, end_lr;              // 0 initial_lr, 1 max_lr, 2 min_lr
    int start_momentum, end_momentum;  // 1 base_momentum, 2 max_momentum
  };
  std::int64_t total_steps_;
  OneCycleLROptions o_;
  std::vector<Phase> phases_;
  std::vector<double> initial_lr_, max_lr_, min_lr_;
};

/// torch.optim.lr_scheduler.SequentialLR: schedulers[i] runs from
/// milestones[i - 1] on (restarting at epoch 0 there). Every scheduler must
/// drive `opt`; milestones has one entry fewer than schedulers.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<std::int64_t> milestones);
  void step() override;

 private:
  std::vector<double> get_lr() override { return last_lr_; }
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<std::int64_t> milestones_;
};

}  // namespace dtensor::nn
