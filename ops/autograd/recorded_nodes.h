// The nodes the library records: a dispatched operator (its OpDef's
// backward) and a redistribute (its gradient goes back unchanged; the engine
// places it like the input).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/ops/autograd.h"

namespace dtensor::autograd::detail {

/// Whether a dispatch of `op` on `args` is to be recorded: grad mode is on,
/// an argument requires grad and the operator is differentiable (with a
/// backward, or without one: then backward() raises if it reaches it).
bool should_record(const std::string& op, const std::vector<OpArg>& args);

/// Records the call (its arguments saved as given) and returns the outputs
/// attached to the new node.
std::vector<DTensor> record_dispatch(const std::string& op, std::vector<OpArg> args,
                                     std::vector<DTensor> outputs);

}  // namespace dtensor::autograd::detail
