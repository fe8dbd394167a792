#include "dtensor/nn/containers.h"

#include "dtensor/core/errors.h"

namespace dtensor::nn {

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  extend(modules);
}

ModuleList& ModuleList::append(std::shared_ptr<Module> module) {
  DTENSOR_CHECK_ARG(module != nullptr, "nn", "ModuleList.append: module {} is null",
                    modules_.size());
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

ModuleList& ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules)
    append(m);
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](std::int64_t index) const {
  const auto n = static_cast<std::int64_t>(modules_.size());
  check_arg(index >= -n && index < n, "nn", "ModuleList: index {} is out of range for {} modules",
            index, n);
  return modules_[static_cast<std::size_t>(index < 0 ? index + n : index)];
}

ModuleDict::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (auto& [key, m] : modules)
    insert(key, std::move(m));
}

ModuleDict& ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  check_arg(!key.empty() && key.find('.') == std::string::npos, "nn",
            "ModuleDict: key '{}' must be a non-empty name without '.'", key);
  check_arg(!contains(key), "nn", "ModuleDict: key '{}' is already taken", key);
  check_arg(module != nullptr, "nn", "ModuleDict: module under key '{}' is null", key);
  register_module(key, module);
  modules_.emplace_back(key, std::move(module));
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : modules_)
    if (k == key) return true;
  return false;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : modules_)
    if (k == key) return m;
  throw InvalidArgument("nn", fmt::format("ModuleDict: no module under key '{}'", key));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : modules_)
    out.push_back(k);
  return out;
}

}  // namespace dtensor::nn
