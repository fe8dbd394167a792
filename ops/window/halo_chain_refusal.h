// What a halo chain refuses to fuse, and why (halo_chain_refusal() and the
// operators' validation): the rules on the input and each layer, and the
// plan's rules, which simulate every norm on every dim.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtensor/ops/halo_chain.h"
#include "ops/window/halo_chain_plan.h"

namespace dtensor::halo::chain {

// The rules on the input alone (halo_chain_input_refusal).
std::optional<std::string> input_refusal(const DTensor& x);

// What the refusal's rules on the layers found, for its rules on the plan.
struct ChainGeometry {
  // Per spatial dim, the window layers (convolutions and pools) in order.
  std::vector<std::vector<detail::ChainWindowDim>> window_layers;
  // Per norm whose statistics are the batch's: the window layers before it.
  std::vector<std::size_t> statistics_at;
};

// The refusal's rules on the input and each layer, and on the layers
// together; the plan's are plan_refusal's.
std::optional<std::string> layer_refusal(const DTensor& x, const std::vector<ChainLayer>& layers,
                                         ChainGeometry& geometry);

// The refusal's rules on the plan of each dim (detail::chain_*_refusal):
// a simulation per norm and dim, the refusal's costliest part.
std::optional<std::string> plan_refusal(const DTensor& x, const ChainGeometry& geometry);

// Both: why the chain cannot run as one exchange, or none.
std::optional<std::string> refusal(const DTensor& x, const std::vector<ChainLayer>& layers);

}  // namespace dtensor::halo::chain
