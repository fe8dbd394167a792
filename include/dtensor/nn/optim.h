// Optimisers with torch.optim's update rules, step for step (the
// single-tensor CPU formulas, in the parameter's dtype): SGD (momentum,
// dampening, nesterov, weight_decay), Adam and AdamW. Each works on every
// rank's own shard: a parameter's gradient and state are placed like the
// parameter, so a step communicates nothing.
//
// state_dict() names the state as a checkpoint stores it:
// "optim.<param>.momentum_buffer", "optim.<param>.exp_avg",
// "optim.<param>.exp_avg_sq" and "optim.step" (the number of steps taken, a
// 0-d replicated tensor in the parameters' dtype). A fresh optimiser's
// state_dict() already holds every state tensor its settings give (zeros,
// placed like the parameter), so
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

class Optimizer {
 public:
  explicit Optimizer(NamedParameters params);
  virtual ~Optimizer() = default;
  /// One update of every parameter that has a gradient.
  void step();
  /// Clears the parameters' gradients (set_to_none).
  void zero_grad();
  std::int64_t steps_taken() const { return steps_; }
  /// Every state tensor the settings give each parameter (zeros before a step
  /// creates it) and "optim.step".
  NamedDTensors state_dict() const;
  /// Restores what state_dict() returned (any placement: each entry is
  /// placed like its parameter). An InvalidArgument lists every unexpected
  /// name, and every missing one: "optim.step", and after step 0 the state
  /// the settings need (momentum_buffer for SGD with momentum, exp_avg and
  /// exp_avg_sq for Adam). Entries saved at step 0 are initial values and
  /// are not kept.
  void load_state_dict(const NamedDTensors& state);

 protected:
  struct ParamState {
    std::string name{};
    DTensor* param{};
    std::map<std::string, std::optional<DTensor>> buffers{};  // by state name (stable references)
  };
  /// The state names a parameter has (e.g. {"exp_avg", "exp_avg_sq"}).
  virtual std::vector<std::string> state_names() const = 0;
  /// Updates one parameter's local shard; `step` counts from 1.
  virtual void update(ParamState& s, const Tensor& grad, std::int64_t step) = 0;
  std::optional<DTensor>& buffer(ParamState& s, const std::string& name);

  std::vector<ParamState> params_;
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

 private:
  std::vector<std::string> state_names() const override;
  void update(ParamState& s, const Tensor& grad, std::int64_t step) override;
  SGDOptions o_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: added to the gradient; AdamW: decoupled
};
class Adam : public Optimizer {
 public:
  Adam(NamedParameters params, AdamOptions options, bool decoupled_weight_decay = false);

 private:
  std::vector<std::string> state_names() const override;
  void update(ParamState& s, const Tensor& grad, std::int64_t step) override;
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
};
/// torch.optim.AdamW.
class AdamW : public Adam {
 public:
  AdamW(NamedParameters params, AdamWOptions options = {})
      : Adam(std::move(params),
             AdamOptions{options.lr, options.beta1, options.beta2, options.eps,
                         options.weight_decay},
             true) {}
  /// AdamOptions as given (their weight_decay default is 0). A template so
  /// that a braced list, {.lr = 1e-3}, always means AdamWOptions.
  template <class O>
  requires std::same_as<O, AdamOptions> AdamW(NamedParameters params, const O& options)
      : Adam(std::move(params), options, true) {}
  static AdamOptions with_default_decay() {
    AdamOptions o;
    o.weight_decay = AdamWOptions{}.weight_decay;
    return o;
  }
};

}  // namespace dtensor::nn
