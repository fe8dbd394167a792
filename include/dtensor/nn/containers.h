// The container modules of torch.nn besides Sequential (module.h):
// Identity, ModuleList and ModuleDict. A container registers what it holds
// as submodules, so their parameters are found under "<index>." or
// "<key>." names, distribute() places them and train()/eval() reach them;
// ModuleList and ModuleDict have no forward of their own (as in torch: the
// owner calls what they hold).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/nn/module.h"

namespace dtensor::nn {

/// torch.nn.Identity: forward returns its input.
struct Identity : Module {
  DTensor forward(const DTensor& input) override { return input; }
};

/// torch.nn.ModuleList: modules named "0", "1", ... in order.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  ModuleList& append(std::shared_ptr<Module> module);
  ModuleList& extend(const std::vector<std::shared_ptr<Module>>& modules);
  std::size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  /// Negative indices count from the end (as Python's); out of range is an
  /// InvalidArgument naming the index.
  const std::shared_ptr<Module>& operator[](std::int64_t index) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// torch.nn.ModuleDict: modules by key, in insertion order. Keys follow
/// torch's rules: not empty, no ".", unique.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules);
  /// Adds `module` under `key` (InvalidArgument naming key when it is empty,
  /// has a ".", or is taken).
  ModuleDict& insert(const std::string& key, std::shared_ptr<Module> module);
  bool contains(const std::string& key) const;
  /// The module under `key` (InvalidArgument naming the key when there is none).
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  std::size_t size() const { return modules_.size(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
};

}  // namespace dtensor::nn
