#include "dtensor/nn/optim.h"

#include <cmath>
#include <set>

#include "dtensor/core/errors.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/kernels/optim.h"

namespace dtensor::nn {
namespace {

void require_float(const DTensor& p, const std::string& name) {
  DTENSOR_CHECK_ARG(p.dtype() == DType::F32 || p.dtype() == DType::F64, "optim",
                    "{}: optimisers update f32 and f64 parameters (this one is {})", name,
                    dtype_name(p.dtype()));
}

DTensor zeros_like(const DTensor& p) {
  return DTensor(Tensor::zeros(p.to_local().shape(), p.dtype(), p.to_local().device()), p.spec());
}

std::string group_name(std::size_t i) {
  return fmt::format("param group {}", i);
}

// The local shard of a state tensor, for a kernel's arguments.
Tensor local(const DTensor& t) {
  return t.to_local();
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, const ParamGroupSettings& defaults,
                     const char* optimiser, bool momentum, bool betas) {
  std::set<std::string> names;
  std::set<const DTensor*> seen;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const ParamGroup& g = groups[i];
    // A setting the optimiser does not read would be silently ignored.
    DTENSOR_CHECK_ARG(momentum || !g.momentum, "optim", "{}: momentum is not a setting of {}",
                      group_name(i), optimiser);
    DTENSOR_CHECK_ARG(betas || (!g.beta1 && !g.beta2), "optim",
                      "{}: beta1 / beta2 are not settings of {}", group_name(i), optimiser);
    ParamGroupSettings s = defaults;
    s.lr = g.lr.value_or(s.lr);
    s.weight_decay = g.weight_decay.value_or(s.weight_decay);
    s.momentum = g.momentum.value_or(s.momentum);
    s.beta1 = g.beta1.value_or(s.beta1);
    s.beta2 = g.beta2.value_or(s.beta2);
    groups_.push_back(s);
    for (const auto& [name, p] : g.params) {
      check_arg(p != nullptr, "optim", "{}: null parameter", name);
      require_float(*p, name);
      // torch: "some parameters appear in more than one parameter group".
      check_arg(seen.insert(p).second, "optim", "{}: the parameter is given twice", name);
      check_arg(names.insert(name).second, "optim",
                "{}: two parameters of this name (state_dict keys must be unique)", name);
      params_.push_back({name, p, i, {}});
    }
  }
}

ParamGroupSettings& Optimizer::param_group(std::size_t i) {
  DTENSOR_CHECK_ARG(i < groups_.size(), "optim", "param group {}: the optimiser has {}", i,
                    groups_.size());
  return groups_[i];
}
const ParamGroupSettings& Optimizer::param_group(std::size_t i) const {
  return const_cast<Optimizer*>(this)->param_group(i);
}

std::vector<std::string> Optimizer::param_group_names(std::size_t i) const {
  param_group(i);
  std::vector<std::string> out;
  for (const auto& s : params_)
    if (s.group == i) out.push_back(s.name);
  return out;
}

std::vector<double> Optimizer::lrs() const {
  std::vector<double> out;
  for (const auto& g : groups_)
    out.push_back(g.lr);
  return out;
}

void Optimizer::set_lr(double lr) {
  for (std::size_t i = 0; i < groups_.size(); ++i)
    set_lr(i, lr);
}

void Optimizer::set_lr(std::size_t group, double lr) {
  DTENSOR_CHECK_ARG(std::isfinite(lr) && lr >= 0, "optim", "{}: {} is not a finite lr >= 0",
                    group_name(group), lr);
  param_group(group).lr = lr;
}

void Optimizer::validate_groups() const {
  for (std::size_t i = 0; i < groups_.size(); ++i)
    validate(groups_[i], group_name(i));
}

DTensor& Optimizer::buffer(ParamState& s, const std::string& name, bool* created) {
  auto& b = s.buffers[name];
  if (created) *created = !b.has_value();
  if (!b) b = zeros_like(*s.param);
  return *b;
}

void Optimizer::zero_grad() {
  for (auto& s : params_)
    s.param->set_grad(std::nullopt);
}

void Optimizer::step() {
  NoGradGuard no_grad;
  // Settings changed between steps are checked before anything moves.
  validate_groups();
  ++steps_;
  for (auto& s : params_) {
    const auto g = s.param->grad();
    if (!g) continue;
    // The engine places gradients like their parameters; a gradient set by
    // hand may not be.
    const DTensor placed = g->placements() == s.param->placements()
                               ? *g
                               : g->redistribute(g->mesh(), s.param->placements());
    update(s, groups_[s.group], placed.to_local().contiguous(), steps_);
  }
}
NamedDTensors Optimizer::state_dict() const {
  // Every state tensor the optimiser's settings give a parameter, zeros where
  // no step has created it yet: a fresh optimiser's state_dict() then names
  // everything a checkpoint holds for it, so
  // load_checkpoint(dir, checkpoint_targets(opt.state_dict())) restores the
  // moments and momentum buffers, not only the step count.
  NamedDTensors out;
  for (const auto& s : params_)
    for (const auto& n : state_names(groups_[s.group])) {
      const auto it = s.buffers.find(n);
      out.emplace_back("optim." + s.name + "." + n,
                       it != s.buffers.end() && it->second ? *it->second : zeros_like(*s.param));
    }
  if (!params_.empty()) {
    const DTensor& p = *params_.front().param;
    const Placements r(static_cast<std::size_t>(p.mesh().ndim()), Replicate());
    const DTensorSpec spec(p.mesh(), r, {}, p.dtype());
    out.emplace_back("optim.step", DTensor(Tensor::full({}, static_cast<double>(steps_), p.dtype(),
                                                        p.to_local().device()),
                                           spec));
  }
  return out;
}

void Optimizer::load_state_dict(const NamedDTensors& state) {
  std::map<std::string, const DTensor*> by_name;
  for (const auto& [k, v] : state)
    by_name[k] = &v;
  std::string unexpected, missing;
  const auto list = [](std::string& to, const std::string& name) {
    to += (to.empty() ? "" : ", ") + name;
  };
  std::set<std::string> known;
  std::int64_t steps = steps_;
  if (!params_.empty()) {
    known.insert("optim.step");
    const auto it = by_name.find("optim.step");
    if (it == by_name.end()) {
      list(missing, "optim.step");
    } else {
      const DTensor& v = *it->second;
      const Placements r(static_cast<std::size_t>(v.mesh().ndim()), Replicate());
      steps = static_cast<std::int64_t>(std::llround(
          (v.placements() == r ? v : v.redistribute(v.mesh(), r)).to_local().item_flat(0)));
    }
  }
  // Before the first step every state tensor is its initial value (absent:
  // SGD's first step copies the gradient into a new momentum buffer), so
  // entries saved at step 0 are not needed and not kept; after it, a step
  // without them would silently restart the moments, so they are required.
  std::vector<std::map<std::string, std::optional<DTensor>>> loaded(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = params_[i];
    for (const auto& n : state_names(groups_[s.group])) {
      const std::string key = "optim." + s.name + "." + n;
      known.insert(key);
      const auto it = by_name.find(key);
      if (it == by_name.end()) {
        if (steps > 0) list(missing, key);
        continue;
      }
      const DTensor& v = *it->second;
      DTENSOR_CHECK_ARG(v.shape() == s.param->shape() && v.dtype() == s.param->dtype(), "optim",
                        "{}: shape {} {}, the parameter is {} {}", key, shape_str(v.shape()),
                        dtype_name(v.dtype()), shape_str(s.param->shape()),
                        dtype_name(s.param->dtype()));
      if (steps == 0) continue;
      const DTensor placed = v.placements() == s.param->placements()
                                 ? v
                                 : v.redistribute(v.mesh(), s.param->placements());
      loaded[i][n] = DTensor(placed.to_local().clone(), placed.spec());
    }
  }
  for (const auto& [k, v] : state)
    if (!known.count(k)) list(unexpected, k);
  check_arg(unexpected.empty(), "optim", "load_state_dict: unexpected [{}]", unexpected);
  check_arg(missing.empty(), "optim",
            "load_state_dict: missing [{}] (after step {} these settings need them: a step "
            "without them would restart from zero state)",
            missing, steps);
  for (std::size_t i = 0; i < params_.size(); ++i)
    params_[i].buffers = std::move(loaded[i]);
  steps_ = steps;
}

// ---- SGD ----

SGD::SGD(NamedParameters params, SGDOptions o)
    : SGD(std::vector<ParamGroup>{{std::move(params)}}, o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o)
    : Optimizer(std::move(groups), {o.lr, o.weight_decay, o.momentum, 0, 0, {}}, "SGD", true,
                false),
      o_(o) {
  validate_groups();
}

void SGD::validate(const ParamGroupSettings& g, const std::string& where) const {
  check_arg(g.lr >= 0, "optim", "{}: lr {} is negative", where, g.lr);
  check_arg(g.momentum >= 0, "optim", "{}: momentum {} is negative", where, g.momentum);
  check_arg(g.weight_decay >= 0, "optim", "{}: weight_decay {} is negative", where, g.weight_decay);
  check_arg(!o_.nesterov || (g.momentum > 0 && o_.dampening == 0), "optim",
            "{}: nesterov needs a momentum and zero dampening", where);
}

std::vector<std::string> SGD::state_names(const ParamGroupSettings& g) const {
  if (g.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(ParamState& s, const ParamGroupSettings& g, const Tensor& grad, std::int64_t) {
  kernels::SgdArgs a;
  a.param = s.param->to_local();
  a.grad = grad;
  if (g.momentum != 0) a.momentum_buffer = local(buffer(s, "momentum_buffer", &a.fresh_buffer));
  a.lr = g.lr;
  a.momentum = g.momentum;
  a.dampening = o_.dampening;
  a.weight_decay = g.weight_decay;
  a.nesterov = o_.nesterov;
  run_kernel(kernels::kSgd, a.param.device().type, a.param.dtype(), a);
}

// ---- Adam / AdamW ----

Adam::Adam(NamedParameters params, AdamOptions o, bool decoupled)
    : Adam(std::vector<ParamGroup>{{std::move(params)}}, o, decoupled) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(groups), {o.lr, o.weight_decay, 0, o.beta1, o.beta2, {}},
                decoupled ? "AdamW" : "Adam", false, true),
      o_(o),
      decoupled_(decoupled) {
  check_arg(o.eps >= 0, "optim", "eps: {} is negative", o.eps);
  validate_groups();
}

void Adam::validate(const ParamGroupSettings& g, const std::string& where) const {
  check_arg(g.lr >= 0, "optim", "{}: lr {} is negative", where, g.lr);
  check_arg(g.beta1 >= 0 && g.beta1 < 1, "optim", "{}: beta1 {} is outside [0, 1)", where, g.beta1);
  check_arg(g.beta2 >= 0 && g.beta2 < 1, "optim", "{}: beta2 {} is outside [0, 1)", where, g.beta2);
  check_arg(g.weight_decay >= 0, "optim", "{}: weight_decay {} is negative", where, g.weight_decay);
}

std::vector<std::string> Adam::state_names(const ParamGroupSettings&) const {
  if (o_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update(ParamState& s, const ParamGroupSettings& g, const Tensor& grad,
                  std::int64_t step) {
  kernels::AdamArgs a;
  a.param = s.param->to_local();
  a.grad = grad;
  a.exp_avg = local(buffer(s, "exp_avg"));
  a.exp_avg_sq = local(buffer(s, "exp_avg_sq"));
  if (o_.amsgrad) a.max_exp_avg_sq = local(buffer(s, "max_exp_avg_sq"));
  a.lr = g.lr;
  a.beta1 = g.beta1;
  a.beta2 = g.beta2;
  a.eps = o_.eps;
  a.weight_decay = g.weight_decay;
  a.decoupled_weight_decay = decoupled_;
  a.step = step;
  run_kernel(kernels::kAdam, a.param.device().type, a.param.dtype(), a);
}

// ---- RMSprop ----

RMSprop::RMSprop(NamedParameters params, RMSpropOptions o)
    : RMSprop(std::vector<ParamGroup>{{std::move(params)}}, o) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer(std::move(groups), {o.lr, o.weight_decay, o.momentum, 0, 0, {}}, "RMSprop", true,
                false),
      o_(o) {
  check_arg(o.alpha >= 0, "optim", "alpha: {} is negative", o.alpha);
  check_arg(o.eps >= 0, "optim", "eps: {} is negative", o.eps);
  validate_groups();
}

void RMSprop::validate(const ParamGroupSettings& g, const std::string& where) const {
  check_arg(g.lr >= 0, "optim", "{}: lr {} is negative", where, g.lr);
  check_arg(g.momentum >= 0, "optim", "{}: momentum {} is negative", where, g.momentum);
  check_arg(g.weight_decay >= 0, "optim", "{}: weight_decay {} is negative", where, g.weight_decay);
}

std::vector<std::string> RMSprop::state_names(const ParamGroupSettings& g) const {
  std::vector<std::string> names{"square_avg"};
  if (g.momentum > 0) names.emplace_back("momentum_buffer");
  if (o_.centered) names.emplace_back("grad_avg");
  return names;
}

void RMSprop::update(ParamState& s, const ParamGroupSettings& g, const Tensor& grad, std::int64_t) {
  kernels::RmspropArgs a;
  a.param = s.param->to_local();
  a.grad = grad;
  a.square_avg = local(buffer(s, "square_avg"));
  if (o_.centered) a.grad_avg = local(buffer(s, "grad_avg"));
  // torch creates it as zeros (SGD's first step copies the gradient instead).
  if (g.momentum > 0) a.momentum_buffer = local(buffer(s, "momentum_buffer"));
  a.lr = g.lr;
  a.alpha = o_.alpha;
  a.eps = o_.eps;
  a.weight_decay = g.weight_decay;
  a.momentum = g.momentum;
  run_kernel(kernels::kRmsprop, a.param.device().type, a.param.dtype(), a);
}

}  // namespace dtensor::nn
