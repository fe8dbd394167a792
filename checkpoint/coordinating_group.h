// The group a checkpoint call agrees and commits over: the mesh group of the
// largest of the tensors' meshes, which must hold every other mesh's ranks
// (the world when there are no tensors).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/placement/dtensor_spec.h"

namespace dtensor::checkpoint {

/// InvalidArgument naming `what` when a mesh has ranks outside the largest one.
std::shared_ptr<ProcessGroup> coordinating_group(const std::vector<const DTensorSpec*>& specs,
                                                 const char* what);

/// A fingerprint of names and specs, and its readable form, for check_ranks_agree.
struct CallDescription {
  std::size_t fingerprint = 0;
  std::string text;
};
CallDescription describe_call(const std::vector<std::string>& names,
                              const std::vector<const DTensorSpec*>& specs);

}  // namespace dtensor::checkpoint
