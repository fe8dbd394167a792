#include "dtensor/nn/optim.h"

#include <cmath>
#include <set>

#include "dtensor/core/errors.h"
#include "dtensor/ops/autograd.h"

namespace dtensor::nn {
namespace {

void require_float(const DTensor& p, const std::string& name) {
  check_arg(p.dtype() == DType::F32 || p.dtype() == DType::F64, "optim",
            "{}: optimisers update f32 and f64 parameters (this one is {})", name,
            dtype_name(p.dtype()));
}

DTensor zeros_like(const DTensor& p) {
  return DTensor(Tensor::zeros(p.to_local().shape(), p.dtype()), p.spec());
}

}  // namespace

Optimizer::Optimizer(NamedParameters params) {
  for (auto& [name, p] : params) {
    check_arg(p != nullptr, "optim", "{}: null parameter", name);
    require_float(*p, name);
    params_.push_back({name, p, {}});
  }
}

std::optional<DTensor>& Optimizer::buffer(ParamState& s, const std::string& name) {
  return s.buffers[name];
}

void Optimizer::zero_grad() {
  for (auto& s : params_)
    s.param->set_grad(std::nullopt);
}

void Optimizer::step() {
  NoGradGuard no_grad;
  ++steps_;
  for (auto& s : params_) {
    const auto g = s.param->grad();
    if (!g) continue;
    // The engine places gradients like their parameters; a gradient set by
    // hand may not be.
    const DTensor placed = g->placements() == s.param->placements()
                               ? *g
                               : g->redistribute(g->mesh(), s.param->placements());
    update(s, placed.to_local().contiguous(), steps_);
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
    for (const auto& n : state_names()) {
      const auto it = s.buffers.find(n);
      out.emplace_back("optim." + s.name + "." + n,
                       it != s.buffers.end() && it->second ? *it->second : zeros_like(*s.param));
    }
  if (!params_.empty()) {
    const DTensor& p = *params_.front().param;
    const Placements r(static_cast<std::size_t>(p.mesh().ndim()), Replicate());
    const DTensorSpec spec(p.mesh(), r, {}, p.dtype());
    out.emplace_back("optim.step",
                     DTensor(Tensor::full({}, static_cast<double>(steps_), p.dtype()), spec));
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
    for (const auto& n : state_names()) {
      const std::string key = "optim." + s.name + "." + n;
      known.insert(key);
      const auto it = by_name.find(key);
      if (it == by_name.end()) {
        if (steps > 0) list(missing, key);
        continue;
      }
      const DTensor& v = *it->second;
      check_arg(v.shape() == s.param->shape() && v.dtype() == s.param->dtype(), "optim",
                "{}: shape {} {}, the parameter is {} {}", key, shape_str(v.shape()),
                dtype_name(v.dtype()), shape_str(s.param->shape()), dtype_name(s.param->dtype()));
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

SGD::SGD(NamedParameters params, SGDOptions o) : Optimizer(std::move(params)), o_(o) {
  check_arg(o.lr >= 0, "optim", "lr: {} is negative", o.lr);
  check_arg(o.momentum >= 0, "optim", "momentum: {} is negative", o.momentum);
  check_arg(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "optim",
            "nesterov: needs a momentum and zero dampening");
}

std::vector<std::string> SGD::state_names() const {
  if (o_.momentum == 0) return {};
  return {"momentum_buffer"};
}

namespace {
template <class T>
void sgd_update(T* p, const T* g0, T* buf, bool fresh, std::int64_t n, const SGDOptions& o) {
  const T wd = static_cast<T>(o.weight_decay), mom = static_cast<T>(o.momentum),
          damp = static_cast<T>(1 - o.dampening), lr = static_cast<T>(-o.lr);
  for (std::int64_t i = 0; i < n; ++i) {
    T g = g0[i];
    if (o.weight_decay != 0) g = g + wd * p[i];  // grad.add(param, alpha=wd)
    if (buf) {
      buf[i] = fresh ? g : buf[i] * mom + damp * g;  // clone, or mul_(m).add_(g, 1-d)
      g = o.nesterov ? g + mom * buf[i] : buf[i];
    }
    p[i] = p[i] + lr * g;  // add_(g, alpha=-lr)
  }
}
}  // namespace

void SGD::update(ParamState& s, const Tensor& grad, std::int64_t) {
  Tensor p = s.param->to_local();
  std::optional<DTensor>* buf = nullptr;
  bool fresh = false;
  if (o_.momentum != 0) {
    buf = &buffer(s, "momentum_buffer");
    fresh = !buf->has_value();
    if (fresh) *buf = zeros_like(*s.param);
  }
  if (p.dtype() == DType::F64)
    sgd_update<double>(p.data<double>(), grad.data<double>(),
                       buf ? (*buf)->to_local().data<double>() : nullptr, fresh, p.numel(), o_);
  else
    sgd_update<float>(p.data<float>(), grad.data<float>(),
                      buf ? (*buf)->to_local().data<float>() : nullptr, fresh, p.numel(), o_);
}

// ---- Adam / AdamW ----

Adam::Adam(NamedParameters params, AdamOptions o, bool decoupled)
    : Optimizer(std::move(params)), o_(o), decoupled_(decoupled) {
  check_arg(o.lr >= 0, "optim", "lr: {} is negative", o.lr);
  check_arg(o.beta1 >= 0 && o.beta1 < 1, "optim", "beta1: {} is outside [0, 1)", o.beta1);
  check_arg(o.beta2 >= 0 && o.beta2 < 1, "optim", "beta2: {} is outside [0, 1)", o.beta2);
  check_arg(o.eps >= 0, "optim", "eps: {} is negative", o.eps);
}

std::vector<std::string> Adam::state_names() const {
  return {"exp_avg", "exp_avg_sq"};
}

namespace {
template <class T>
void adam_update(T* p, const T* g0, T* m, T* v, std::int64_t n, const AdamOptions& o,
                 bool decoupled, std::int64_t step) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  const T step_size = static_cast<T>(o.lr / bc1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T w1 = static_cast<T>(1 - o.beta1), b2 = static_cast<T>(o.beta2),
          w2 = static_cast<T>(1 - o.beta2), eps = static_cast<T>(o.eps),
          wd = static_cast<T>(o.weight_decay), decay = static_cast<T>(1 - o.lr * o.weight_decay);
  for (std::int64_t i = 0; i < n; ++i) {
    T g = g0[i];
    if (o.weight_decay != 0) {
      if (decoupled)
        p[i] = p[i] * decay;  // param.mul_(1 - lr * wd)
      else
        g = g + wd * p[i];  // grad.add(param, alpha=wd)
    }
    m[i] = m[i] + w1 * (g - m[i]);  // lerp_(grad, 1 - beta1), weight < 0.5
    v[i] = v[i] * b2 + w2 * g * g;  // mul_(beta2).addcmul_(g, g, 1 - beta2)
    const T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] + (-step_size) * m[i] / denom;  // addcdiv_(m, denom, -step_size)
  }
}
}  // namespace

void Adam::update(ParamState& s, const Tensor& grad, std::int64_t step) {
  auto& m = buffer(s, "exp_avg");
  auto& v = buffer(s, "exp_avg_sq");
  if (!m) m = zeros_like(*s.param);
  if (!v) v = zeros_like(*s.param);
  Tensor p = s.param->to_local();
  if (p.dtype() == DType::F64)
    adam_update<double>(p.data<double>(), grad.data<double>(), m->to_local().data<double>(),
                        v->to_local().data<double>(), p.numel(), o_, decoupled_, step);
  else
    adam_update<float>(p.data<float>(), grad.data<float>(), m->to_local().data<float>(),
                       v->to_local().data<float>(), p.numel(), o_, decoupled_, step);
}

}  // namespace dtensor::nn
