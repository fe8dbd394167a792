// Optimisers with torch.optim's update rules, step for step (the
// single-tensor CPU formulas, in the parameter's dtype): SGD (momentum,
// dampening, nesterov, weight_decay), Adam and AdamW (amsgrad), RMSprop
// (alpha, eps, weight_decay, momentum, centered). Each works on every
// rank's own shard: a parameter's gradient and state are placed like the
// parameter, so a step communicates nothing. The arithmetic is the backends'
// (the kernel slots of dtensor/ops/kernels/optim.h).
//
// Parameter groups are torch's param_groups: each group's lr, weight_decay,
// momentum and betas default to the optimiser's options and can be set per
// group, at construction (ParamGroup) and between steps (param_group(i),
// set_lr), which is how the schedulers of lr_scheduler.h drive them.
//
// state_dict() names the state as a checkpoint stores it:
// "optim.<param>.momentum_buffer", "optim.<param>.exp_avg",
// "optim.<param>.exp_avg_sq", "optim.<param>.max_exp_avg_sq",
// "optim.<param>.square_avg", "optim.<param>.grad_avg" and "optim.step" (the
// number of steps taken, a 0-d replicated tensor in the parameters' dtype),
// whatever group a parameter is in. A fresh optimiser's state_dict() already
// holds every state tensor its settings give (zeros, placed like the
// parameter), so
//   opt.load_state_dict(load_checkpoint(dir, checkpoint_targets(opt.state_dict())))
// restores all of it.
#pragma once

#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/nn/module.h"

namespace dtensor::nn {

using NamedParameters = std::vector<std::pair<std::string, DTensor*>>;

/// A parameter group as the constructor takes it: the parameters and the
/// settings that differ from the optimiser's options (unset: the option).
/// A setting the optimiser does not have (betas for SGD, momentum for Adam)
/// is an InvalidArgument.
struct ParamGroup {
  NamedParameters params{};
  std::optional<double> lr{}, weight_decay{}, momentum{}, beta1{}, beta2{};
};

/// One group's current settings (torch's param_groups[i] entries). Those the
/// optimiser has no use for hold 0.
struct ParamGroupSettings {
  double lr = 0, weight_decay = 0, momentum = 0, beta1 = 0, beta2 = 0;
  /// The lr a scheduler started from (torch's group['initial_lr']): set by
  /// the first scheduler made for the optimiser, kept by later ones.
  std::optional<double> initial_lr{};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of every parameter that has a gradient, each with its group's
  /// settings (checked first: an InvalidArgument names the group).
  void step();
  /// Clears the parameters' gradients (set_to_none).
  void zero_grad();
  std::int64_t steps_taken() const { return steps_; }

  std::size_t num_param_groups() const { return groups_.size(); }
  /// Group i's settings; a scheduler or the user may change them between steps.
  ParamGroupSettings& param_group(std::size_t i);
  const ParamGroupSettings& param_group(std::size_t i) const;
  /// The names of group i's parameters.
  std::vector<std::string> param_group_names(std::size_t i) const;
  /// Every group's lr, in group order.
  std::vector<double> lrs() const;
  /// Group i's lr.
  double lr(std::size_t group = 0) const { return param_group(group).lr; }
  /// Sets every group's lr (InvalidArgument naming lr if negative or not finite).
  void set_lr(double lr);
  /// Sets group i's lr.
  void set_lr(std::size_t group, double lr);
  /// Whether the groups have a momentum (SGD, RMSprop) or betas (Adam, AdamW):
  /// what OneCycleLR cycles.
  virtual bool has_momentum() const { return false; }
  virtual bool has_betas() const { return false; }

  /// Every state tensor the settings give each parameter (zeros before a step
  /// creates it) and "optim.step".
  NamedDTensors state_dict() const;
  /// Restores what state_dict() returned (any placement: each entry is
  /// placed like its parameter). An InvalidArgument lists every unexpected
  /// name, and every missing one: "optim.step", and after step 0 the state
  /// the settings need (momentum_buffer for SGD with momentum, exp_avg and
  /// exp_avg_sq for Adam, ...). Entries saved at step 0 are initial values
  /// and are not kept.
  void load_state_dict(const NamedDTensors& state);

 protected:
  /// `defaults` are the options' settings; each group's unset ones come from
  /// there. `optimiser` names it in messages ("SGD"); `momentum` and `betas`
  /// say which settings a group may give.
  Optimizer(std::vector<ParamGroup> groups, const ParamGroupSettings& defaults,
            const char* optimiser, bool momentum, bool betas);

  struct ParamState {
    std::string name{};
    DTensor* param{};
    std::size_t group = 0;
    std::map<std::string, std::optional<DTensor>> buffers{};  // by state name (stable references)
  };
  /// The state names a parameter of a group with these settings has (e.g.
  /// {"exp_avg", "exp_avg_sq"}).
  virtual std::vector<std::string> state_names(const ParamGroupSettings& group) const = 0;
  /// Throws InvalidArgument naming `where` ("param group 1") and the setting
  /// when a setting is out of range.
  virtual void validate(const ParamGroupSettings& group, const std::string& where) const = 0;
  /// Updates one parameter's local shard; `step` counts from 1.
  virtual void update(ParamState& s, const ParamGroupSettings& group, const Tensor& grad,
                      std::int64_t step) = 0;
  /// The state tensor `name` of s, created as zeros like the parameter when
  /// absent; `created` (if given) says whether it was.
  DTensor& buffer(ParamState& s, const std::string& name, bool* created = nullptr);
  /// Validates every group (the constructors of the derived classes call it).
  void validate_groups() const;

  std::vector<ParamState> params_;
  std::vector<ParamGroupSettings> groups_;
  std::int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  SGD(NamedParameters params, SGDOptions options);
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  bool has_momentum() const override { return true; }

 private:
  std::vector<std::string> state_names(const ParamGroupSettings& group) const override;
  void validate(const ParamGroupSettings& group, const std::string& where) const override;
  void update(ParamState& s, const ParamGroupSettings& group, const Tensor& grad,
              std::int64_t step) override;
  SGDOptions o_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: added to the gradient; AdamW: decoupled
  bool amsgrad = false;     // normalise by the largest exp_avg_sq so far (max_exp_avg_sq)
};
class Adam : public Optimizer {
 public:
  Adam(NamedParameters params, AdamOptions options, bool decoupled_weight_decay = false);
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled_weight_decay = false);
  bool has_betas() const override { return true; }

 private:
  std::vector<std::string> state_names(const ParamGroupSettings& group) const override;
  void validate(const ParamGroupSettings& group, const std::string& where) const override;
  void update(ParamState& s, const ParamGroupSettings& group, const Tensor& grad,
              std::int64_t step) override;
  AdamOptions o_;
  bool decoupled_;
};
/// AdamW's options: AdamOptions with torch.optim.AdamW's weight_decay default,
/// a struct of its own so that designated initialisers keep it
/// (nn::AdamW(params, {.lr = 1e-3}) decays by 1e-2).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: param *= 1 - lr * weight_decay
  bool amsgrad = false;

  AdamOptions as_adam() const { return {lr, beta1, beta2, eps, weight_decay, amsgrad}; }
};
/// torch.optim.AdamW.
class AdamW : public Adam {
 public:
  AdamW(NamedParameters params, AdamWOptions options = {})
      : Adam(std::move(params), options.as_adam(), true) {}
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {})
      : Adam(std::move(groups), options.as_adam(), true) {}
  /// AdamOptions as given (their weight_decay default is 0). A template so
  /// that a braced list, {.lr = 1e-3}, always means AdamWOptions.
  template <class O>
  requires std::same_as<O, AdamOptions> AdamW(NamedParameters params, const O& options)
      : Adam(std::move(params), options, true) {}
  template <class O>
  requires std::same_as<O, AdamOptions> AdamW(std::vector<ParamGroup> groups, const O& options)
      : Adam(std::move(groups), options, true) {}
  static AdamOptions with_default_decay() {
    AdamOptions o;
    o.weight_decay = AdamWOptions{}.weight_decay;
    return o;
  }
};

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // smoothing of square_avg
  double eps = 1e-8;
  double weight_decay = 0;  // added to the gradient
  double momentum = 0;      // > 0: a momentum_buffer
  bool centered = false;    // normalise by the variance estimate (grad_avg)
};
/// torch.optim.RMSprop.
class RMSprop : public Optimizer {
 public:
  RMSprop(NamedParameters params, RMSpropOptions options);
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options);
  bool has_momentum() const override { return true; }

 private:
  std::vector<std::string> state_names(const ParamGroupSettings& group) const override;
  void validate(const ParamGroupSettings& group, const std::string& where) const override;
  void update(ParamState& s, const ParamGroupSettings& group, const Tensor& grad,
              std::int64_t step) override;
  RMSpropOptions o_;
};

}  // namespace dtensor::nn
