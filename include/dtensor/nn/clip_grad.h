// torch.nn.utils.clip_grad_norm_ for distributed parameters: the norm of all
// the gradients together, as if each were one whole tensor on one process,
// with one all-reduce over the mesh for the whole model.
//
// Each rank computes its shards' parts (sum |g|^p, or max |g|) of every
// gradient, counting a gradient replicated along a mesh dim only on that
// dim's coordinate 0 (once, not once per rank), and one all-reduce of the
// vector of parts gives every gradient's norm on every rank. The gradient
// of a Partial parameter (the engine reduces every other one) is reduced
// into a copy for its norm first, which communicates; its parts are then
// scaled in place.
#pragma once

#include <limits>
#include <vector>

#include "dtensor/nn/optim.h"

namespace dtensor::nn {

/// Scales every gradient of `params` (those that have one) by
/// min(1, max_norm / (total + 1e-6)), total being the norm_type-norm of the
/// gradients' norms, and returns total (0 without gradients). norm_type is
/// > 0 or infinity (the largest |g|); max_norm >= 0. Every parameter with a
/// gradient must be on one mesh, and every rank of it must call this with
/// the same parameters (a collective). An InvalidArgument names max_norm or
/// norm_type when they are out of range.
double clip_grad_norm_(const std::vector<DTensor*>& params, double max_norm, double norm_type = 2);
/// The same for named parameters (Module::named_parameters()).
double clip_grad_norm_(const NamedParameters& params, double max_norm, double norm_type = 2);

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace dtensor::nn
