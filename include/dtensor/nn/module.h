// Modules with PyTorch's names and semantics: parameters and buffers under
// dotted names (named_parameters(), state_dict()), submodules, train/eval.
//
// A module is built on every rank with the same arguments; its parameters
// start as whole (global) tensors, initialised from the generator that
// manual_seed() seeds (PyTorch's default initialisations, not its random
// stream). distribute() places them on a mesh, by a sharding plan
// (replicated by default), taking rank 0's values, and marks the parameters
// requires_grad. Forward calls need a distributed module.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor::nn {

using NamedDTensors = std::vector<std::pair<std::string, DTensor>>;

/// Seeds the generator module constructors initialise parameters from
/// (per thread; torch.manual_seed).
void manual_seed(std::uint64_t seed);
/// A tensor of `shape` drawn uniformly from [low, high) by that generator.
Tensor uniform(const Shape& shape, double low, double high, DType dtype);

/// Where parameters go: the first rule whose pattern matches a parameter's
/// or buffer's dotted name (shell-style wildcards: "enc1.*.weight") gives
/// its placements; anything no rule matches is replicated.
struct ShardingPlan {
  std::vector<std::pair<std::string, Placements>> rules{};
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The one-input forward most modules have (user modules may add others).
  virtual DTensor forward(const DTensor& input);
  /// forward(input), with the agreement checks of its calls that do not
  /// communicate confirmed once, before the output is returned, instead of
  /// each at its call (dtensor/ops/deferred_agreement.h): a call the ranks
  /// disagree on is still raised on every rank, naming it, by this call.
  DTensor operator()(const DTensor& input);

  /// Parameters (and buffers) by dotted name, in registration order,
  /// submodules' after their parent's own ("enc1.conv1.weight"); a module
  /// met twice gives its tensors once, under the first name (torch's
  /// remove_duplicate). state_dict() keeps every name, as torch's does.
  std::vector<std::pair<std::string, DTensor*>> named_parameters();
  std::vector<DTensor*> parameters();
  std::vector<std::pair<std::string, DTensor*>> named_buffers();
  std::vector<std::pair<std::string, Module*>> named_children();
  /// Parameters and buffers (torch's state_dict: values, not the live tensors).
  NamedDTensors state_dict();
  /// Copies every entry into the tensor of that name (redistributed to its
  /// placements; the parameter keeps its identity and autograd state). With
  /// `strict`, a missing or unexpected name is an InvalidArgument listing them.
  void load_state_dict(const NamedDTensors& state, bool strict = true);

  /// Places every parameter and buffer on `mesh` (a collective: every rank
  /// calls it with the same plan); rank 0's initial values are used. One
  /// distributed before (by an earlier call, or as a submodule distributed
  /// on its own) stays as it is where the plan asks for what it has, and is
  /// an InvalidArgument naming it otherwise (as torch's distribute_tensor of
  /// a DTensor). The plan is checked whole before anything is placed.
  void distribute(const DeviceMesh& mesh, const ShardingPlan& plan = {});
  bool is_distributed() const { return distributed_; }

  /// Converts every floating parameter and buffer (and gradient) to `dtype`,
  /// in place, as torch's module.to(dtype): a parameter keeps its identity,
  /// its placements and requires_grad (an optimiser built on it still
  /// holds it; build it after the conversion so that its state matches).
  /// Before or after distribute(). Returns this module.
  Module& to(DType dtype);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Clears every parameter's gradient (set_to_none, PyTorch's default).
  void zero_grad();

 protected:
  /// A registered parameter or buffer, by its place in this module.
  struct Ref {
    std::size_t index = 0;
  };
  /// Registers a parameter (a whole tensor until distribute()).
  Ref register_parameter(const std::string& name, Tensor initial);
  Ref register_buffer(const std::string& name, Tensor initial);
  /// Registers a child module (one may be shared by several parents; one
  /// that is this module or contains it is an InvalidArgument).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  /// The distributed value of a registered parameter or buffer
  /// (InvalidArgument naming the module's parameter before distribute()).
  const DTensor& value(Ref ref) const;
  std::optional<DTensor> value_if(const std::optional<Ref>& ref) const {
    return ref ? std::optional<DTensor>(value(*ref)) : std::nullopt;
  }
  /// Replaces a buffer's value (e.g. batch_norm's updated running statistics).
  void set_buffer(Ref ref, const DTensor& value);

 private:
  struct Slot {
    std::string name{};
    bool is_buffer{};
    Tensor initial{};
    std::unique_ptr<std::optional<DTensor>> value{};  // a stable address for named_parameters()
  };
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  // Whether `target` is this module or one below it (visited: shared
  // sub-modules are walked once).
  bool reaches(const Module* target, std::unordered_set<const Module*>& visited) const;
  void collect(const std::string& prefix, bool buffers, bool params,
               std::vector<std::pair<std::string, DTensor*>>& out);
  // With `check`, only the check of what was distributed before (first,
  // so that an InvalidArgument leaves nothing half placed).
  void distribute_with_prefix(const DeviceMesh& mesh, const ShardingPlan& plan,
                              const std::string& prefix, std::vector<const Module*>& visited,
                              bool check);

  std::vector<Slot> slots_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool distributed_ = false;
};

/// Modules applied in order, named "0", "1", ... (torch.nn.Sequential).
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  Sequential& push_back(std::shared_ptr<Module> module);
  DTensor forward(const DTensor& input) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace dtensor::nn
