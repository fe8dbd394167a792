#include "nn/fusion_decisions.h"

#include <algorithm>
#include <mutex>

#include "dtensor/core/config.h"
#include "dtensor/core/process_group.h"

namespace dtensor::nn::detail {
namespace {

// Lists remembered: past this many, those whose modules died go first, then
// the least recently used. Runs per list: all forgotten at once when full
// (inputs of ever new shapes).
constexpr std::size_t kLists = 256;
constexpr std::size_t kRunsPerList = 512;

// What the search read besides the modules, held by value: a DTensorSpec
// would keep its mesh, and the mesh its process groups, alive.
struct Setting {
  Shape shape;
  DType dtype;
  Placements placements;
  DeviceType device;
  Shape mesh_shape;
  std::vector<int> mesh_ranks;
  double message_seconds;
  std::optional<Config::SimLink> link;

  explicit Setting(const DTensor& x)
      : shape(x.shape()),
        dtype(x.dtype()),
        placements(x.placements()),
        device(x.mesh().device_type()),
        mesh_shape(x.mesh().shape()),
        mesh_ranks(x.mesh().ranks()),
        message_seconds(x.mesh().get_mesh_group()->message_seconds()),
        link(config().sim_link) {}
  bool operator==(const Setting& o) const {
    const bool same_link =
        link.has_value() == o.link.has_value() &&
        (!link || (link->latency_us == o.link->latency_us && link->gbit == o.link->gbit));
    return same_link && shape == o.shape && dtype == o.dtype && placements == o.placements &&
           device == o.device && mesh_shape == o.mesh_shape && mesh_ranks == o.mesh_ranks &&
           message_seconds == o.message_seconds;
  }
};

struct Run {
  std::size_t begin, end;
  Setting setting;
};

}  // namespace

struct FusionDecisions::List {
  std::vector<Module*> modules;
  std::vector<std::weak_ptr<Module>> alive;  // whether each is still that module
  std::vector<bool> training;
  std::vector<Run> runs;

  bool dead() const {
    return std::any_of(alive.begin(), alive.end(), [](const auto& w) { return w.expired(); });
  }
  bool matches(const std::vector<std::shared_ptr<Module>>& m) const {
    if (m.size() != modules.size()) return false;
    for (std::size_t k = 0; k < m.size(); ++k)
      if (m[k].get() != modules[k] || alive[k].expired() || m[k]->is_training() != training[k])
        return false;
    return true;
  }
};

namespace {

// Never destroyed: a module list may still run from another static's
// destructor at exit.
std::mutex& lists_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<std::shared_ptr<FusionDecisions::List>>& lists() {
  static auto* l = new std::vector<std::shared_ptr<FusionDecisions::List>>;
  return *l;
}

}  // namespace

FusionDecisions::FusionDecisions(const std::vector<std::shared_ptr<Module>>& modules) {
  std::lock_guard lock(lists_mutex());
  auto& all = lists();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const auto& l) { return l->matches(modules); });
  if (it != all.end()) {
    list_ = *it;
    std::rotate(it, it + 1, all.end());  // the most recent last
    return;
  }
  list_ = std::make_shared<List>();
  for (const auto& m : modules) {
    list_->modules.push_back(m.get());
    list_->alive.push_back(m);
    list_->training.push_back(m->is_training());
  }
  if (all.size() >= kLists) {
    all.erase(std::remove_if(all.begin(), all.end(), [](const auto& l) { return l->dead(); }),
              all.end());
    if (all.size() >= kLists) all.erase(all.begin());
  }
  all.push_back(list_);
}

std::optional<std::size_t> FusionDecisions::lookup(std::size_t begin, const DTensor& input) const {
  const Setting setting(input);
  std::lock_guard lock(lists_mutex());
  for (const Run& r : list_->runs)
    if (r.begin == begin && r.setting == setting) return r.end;
  return std::nullopt;
}

void FusionDecisions::remember(std::size_t begin, const DTensor& input, std::size_t end) {
  Setting setting(input);
  std::lock_guard lock(lists_mutex());
  auto& runs = list_->runs;
  runs.erase(std::remove_if(runs.begin(), runs.end(),
                            [&](const Run& r) { return r.begin == begin && r.setting == setting; }),
             runs.end());
  if (runs.size() >= kRunsPerList) runs.clear();
  runs.push_back(Run{begin, end, std::move(setting)});
}

void forget_fusion_decisions() {
  std::lock_guard lock(lists_mutex());
  lists().clear();
}

}  // namespace dtensor::nn::detail
