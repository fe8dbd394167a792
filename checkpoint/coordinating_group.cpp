#include "checkpoint/coordinating_group.h"

#include <algorithm>
#include <functional>

#include "dtensor/core/distributed.h"

namespace dtensor::checkpoint {

std::shared_ptr<ProcessGroup> coordinating_group(const std::vector<const DTensorSpec*>& specs,
                                                 const char* what) {
  if (specs.empty()) return world();
  const DeviceMesh* largest = &specs[0]->mesh();
  for (const auto* s : specs)
    if (s->mesh().size() > largest->size()) largest = &s->mesh();
  const auto& ranks = largest->ranks();
  for (const auto* s : specs)
    for (int r : s->mesh().ranks())
      DTENSOR_CHECK_ARG(
          std::find(ranks.begin(), ranks.end(), r) != ranks.end(), "checkpoint",
          "{}: the tensors' meshes must all lie within the largest one ({}), but {} has "
          "rank {}",
          what, largest->str(), s->mesh().str(), r);
  return largest->get_mesh_group();
}

CallDescription describe_call(const std::vector<std::string>& names,
                              const std::vector<const DTensorSpec*>& specs) {
  CallDescription d;
  for (std::size_t i = 0; i < names.size(); ++i)
    d.text += fmt::format("{}: {}\n", names[i], specs[i]->str());
  d.fingerprint = std::hash<std::string>{}(d.text);
  return d;
}

}  // namespace dtensor::checkpoint
