#include "dtensor/nn/module.h"

#include <fnmatch.h>

#include <algorithm>
#include <random>
#include <set>
#include <unordered_set>

#include "dtensor/core/errors.h"
#include "dtensor/nn/halo_region.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/deferred_agreement.h"
#include "nn/fusion_decisions.h"

namespace dtensor::nn {
namespace {

thread_local std::mt19937_64 generator(0);

Placements placements_for(const std::string& name, const ShardingPlan& plan,
                          const DeviceMesh& mesh) {
  for (const auto& [pattern, placements] : plan.rules)
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return placements;
  return Placements(static_cast<std::size_t>(mesh.ndim()), Replicate());
}

std::string joined(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

void manual_seed(std::uint64_t seed) {
  generator.seed(seed);
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::F64);
  std::uniform_real_distribution<double> dist(low, high);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = dist(generator);
  return dtype == DType::F64 ? t : t.to(dtype);
}

DTensor Module::forward(const DTensor&) {
  throw NotSupported("nn", "this module has no one-input forward");
}

DTensor Module::operator()(const DTensor& input) {
  // The module's output is what leaves the call: the checks its calls left
  // for later are confirmed before it does, so each silent call (a 1x1
  // convolution, a pool or cat without a halo) no longer waits a one-way
  // latency for its peers.
  DeferredAgreementScope checks;
  DTensor out = forward(input);
  checks.confirm();
  return out;
}

Module::Ref Module::register_parameter(const std::string& name, Tensor initial) {
  slots_.push_back({name, false, std::move(initial), std::make_unique<std::optional<DTensor>>()});
  return {slots_.size() - 1};
}

Module::Ref Module::register_buffer(const std::string& name, Tensor initial) {
  slots_.push_back({name, true, std::move(initial), std::make_unique<std::optional<DTensor>>()});
  return {slots_.size() - 1};
}

bool Module::reaches(const Module* target, std::unordered_set<const Module*>& visited) const {
  if (this == target) return true;
  if (!visited.insert(this).second) return false;
  for (const auto& [name, child] : children_)
    if (child->reaches(target, visited)) return true;
  return false;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_arg(module != nullptr, "nn", "register_module: '{}' is null", name);
  // A module inside itself would make every walk over the tree (parameters,
  // train, to, distribute) endless, and its shared pointers a leak.
  std::unordered_set<const Module*> visited;
  check_arg(!module->reaches(this, visited), "nn",
            "register_module: '{}' is this module or contains it (a module cannot contain "
            "itself)",
            name);
  children_.emplace_back(name, std::move(module));
}

const DTensor& Module::value(Ref ref) const {
  const Slot& s = slots_.at(ref.index);
  if (!s.value->has_value()) {
    // Named by the first slot registered, not the one asked for: a forward
    // may read its arguments in any order (C++ evaluates them right to left
    // here), and "weight" is what a user looks for.
    const auto first = std::find_if(slots_.begin(), slots_.end(),
                                    [](const Slot& o) { return !o.value->has_value(); });
    throw InvalidArgument(
        "nn", fmt::format("{}: the module is not distributed yet (call distribute(mesh) first)",
                          first->name));
  }
  return **s.value;
}

void Module::set_buffer(Ref ref, const DTensor& v) {
  Slot& s = slots_.at(ref.index);
  check_arg(s.is_buffer, "nn", "{}: set_buffer on a parameter", s.name);
  *s.value = v.detach();
}

void Module::collect(const std::string& prefix, bool buffers, bool params,
                     std::vector<std::pair<std::string, DTensor*>>& out) {
  // PyTorch's order: a module's parameters, then its buffers, then its
  // children's, each in registration order.
  for (const bool buffer_pass : {false, true}) {
    if (buffer_pass ? !buffers : !params) continue;
    for (auto& s : slots_) {
      if (s.is_buffer != buffer_pass) continue;
      DTENSOR_CHECK_ARG(s.value->has_value(), "nn",
                        "{}: the module is not distributed yet (call distribute(mesh) first)",
                        joined(prefix, s.name));
      out.emplace_back(joined(prefix, s.name), &**s.value);
    }
  }
  for (auto& [name, child] : children_)
    child->collect(joined(prefix, name), buffers, params, out);
}

namespace {

// Each tensor once, under the first name it has (torch's remove_duplicate):
// a shared module's parameters are stepped and counted once.
std::vector<std::pair<std::string, DTensor*>> first_names(
    std::vector<std::pair<std::string, DTensor*>> all) {
  std::vector<std::pair<std::string, DTensor*>> out;
  std::unordered_set<const DTensor*> seen;
  for (auto& entry : all)
    if (seen.insert(entry.second).second) out.push_back(std::move(entry));
  return out;
}

}  // namespace

std::vector<std::pair<std::string, DTensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, DTensor*>> out;
  collect("", false, true, out);
  return first_names(std::move(out));
}

std::vector<DTensor*> Module::parameters() {
  std::vector<DTensor*> out;
  for (auto& [name, p] : named_parameters())
    out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, DTensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, DTensor*>> out;
  collect("", true, false, out);
  return first_names(std::move(out));
}

std::vector<std::pair<std::string, Module*>> Module::named_children() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, child] : children_)
    out.emplace_back(name, child.get());
  return out;
}

NamedDTensors Module::state_dict() {
  std::vector<std::pair<std::string, DTensor*>> all;
  collect("", true, true, all);
  NamedDTensors out;
  for (auto& [name, t] : all)
    out.emplace_back(name, t->detach());
  return out;
}

void Module::load_state_dict(const NamedDTensors& state, bool strict) {
  std::vector<std::pair<std::string, DTensor*>> all;
  collect("", true, true, all);
  std::set<std::string> given;
  for (const auto& [name, t] : state)
    given.insert(name);
  if (strict) {
    std::string missing, unexpected;
    std::set<std::string> have;
    for (const auto& [name, t] : all) {
      have.insert(name);
      if (!given.count(name)) missing += (missing.empty() ? "" : ", ") + name;
    }
    for (const auto& name : given)
      if (!have.count(name)) unexpected += (unexpected.empty() ? "" : ", ") + name;
    check_arg(missing.empty() && unexpected.empty(), "load_state_dict",
              "state: missing [{}], unexpected [{}]", missing, unexpected);
  }
  NoGradGuard no_grad;
  for (auto& [name, target] : all) {
    const DTensor* src = nullptr;
    for (const auto& [n, t] : state)
      if (n == name) src = &t;
    if (!src) continue;
    DTENSOR_CHECK_ARG(src->shape() == target->shape() && src->dtype() == target->dtype(),
                      "load_state_dict", "{}: given {} {}, the module has {} {}", name,
                      shape_str(src->shape()), dtype_name(src->dtype()), shape_str(target->shape()),
                      dtype_name(target->dtype()));
    DTENSOR_CHECK_ARG(src->mesh() == target->mesh(), "load_state_dict",
                      "{}: given on mesh {}, the module is on {}", name, src->mesh().str(),
                      target->mesh().str());
    const DTensor placed = src->placements() == target->placements()
                               ? *src
                               : src->redistribute(src->mesh(), target->placements());
    // In place: the parameter keeps its identity (optimisers and autograd
    // state refer to it).
    Tensor local = target->to_local();
    local.copy_(placed.to_local());
  }
}

void Module::distribute(const DeviceMesh& mesh, const ShardingPlan& plan) {
  detail::forget_fusion_decisions();  // they read the parameters' layout
  for (const bool check : {true, false}) {
    std::vector<const Module*> visited{this};
    distribute_with_prefix(mesh, plan, "", visited, check);
  }
}

void Module::distribute_with_prefix(const DeviceMesh& mesh, const ShardingPlan& plan,
                                    const std::string& prefix, std::vector<const Module*>& visited,
                                    bool check) {
  for (auto& s : slots_) {
    const std::string name = joined(prefix, s.name);
    const Placements placements = placements_for(name, plan, mesh);
    if (s.value->has_value()) {
      // Distributed before: its initial values are gone, and placing it
      // anew would drop what training made of it. The plan's placements
      // normalised as the tensor's were (Shard(-1) is the last dim).
      const DTensor& d = **s.value;
      DTENSOR_CHECK_ARG(
          d.mesh() == mesh &&
              DTensorSpec(mesh, placements, d.shape(), d.dtype()).placements() == d.placements(),
          "nn",
          "distribute: {} is already distributed, as {} on {}, and this call asks for {} on {}: "
          "distribute it with a plan that agrees, or build the module anew",
          name, placements_str(d.placements()), d.mesh().str(), placements_str(placements),
          mesh.str());
      continue;
    }
    if (check) {
      // The plan's placements for this tensor are valid (their count, their
      // dims), so that the placing pass does not stop half way.
      (void)DTensorSpec(mesh, placements, s.initial.shape(), s.initial.dtype());
      continue;
    }
    DTensor d = distribute_tensor(s.initial, mesh, placements);
    if (!s.is_buffer) d.requires_grad_();
    *s.value = std::move(d);
    s.initial = Tensor();  // the DTensor holds the values now
  }
  // A child met before in this call (a module shared by two parents, or used
  // twice in a Sequential) is placed under its first name only.
  for (auto& [name, child] : children_) {
    if (std::find(visited.begin(), visited.end(), child.get()) != visited.end()) continue;
    visited.push_back(child.get());
    child->distribute_with_prefix(mesh, plan, joined(prefix, name), visited, check);
  }
  if (!check) distributed_ = true;
}

Module& Module::to(DType dtype) {
  detail::forget_fusion_decisions();  // they read the parameters' dtypes
  NoGradGuard no_grad;
  for (auto& s : slots_) {
    if (!s.value->has_value()) {
      if (s.initial.defined() && s.initial.dtype() != dtype) s.initial = s.initial.to(dtype);
      continue;
    }
    DTensor& p = **s.value;
    if (p.dtype() == dtype) continue;
    const std::optional<DTensor> grad = p.grad();
    const bool requires_grad = p.requires_grad();
    const DTensorSpec& was = p.spec();
    // The same DTensor object takes the converted values, so every pointer
    // named_parameters() handed out stays valid.
    p = DTensor(p.to_local().to(dtype),
                DTensorSpec(was.mesh(), was.placements(), was.shape(), dtype));
    if (requires_grad) p.requires_grad_();
    if (grad)
      p.set_grad(DTensor(grad->to_local().to(dtype),
                         DTensorSpec(grad->mesh(), grad->placements(), grad->shape(), dtype)));
  }
  for (auto& [name, child] : children_)
    child->to(dtype);
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_)
    child->train(on);
}

void Module::zero_grad() {
  for (DTensor* p : parameters())
    p->set_grad(std::nullopt);
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules)
    push_back(std::move(m));
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

// Runs of convolutions and group norms exchange their halos once where it
// pays (halo_region.h); the result is the modules' one by one.
DTensor Sequential::forward(const DTensor& input) {
  return forward_fusing_halos(modules_, input);
}

}  // namespace dtensor::nn
