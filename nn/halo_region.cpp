#include "dtensor/nn/halo_region.h"

#include <typeinfo>

#include "dtensor/nn/layers.h"
#include "dtensor/ops/halo_chain.h"

namespace dtensor::nn {
namespace {

// The channels the last convolution of `layers` gives (0 when none).
std::int64_t channels_after(const std::vector<ChainLayer>& layers) {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it)
    if (const auto* c = std::get_if<ChainConv>(&*it)) return c->weight.shape()[0];
  return 0;
}

// The run of chainable modules from `begin`: its layers, and where it ends.
// An InstanceNorm is a group norm with a group per channel; a ReLU folds into
// the norm before it (relu(norm(x)) is its fused activation); a ReLU
// anywhere else ends the run.
std::size_t chain_run(const std::vector<std::shared_ptr<Module>>& modules, std::size_t begin,
                      std::vector<ChainLayer>& layers) {
  std::size_t at = begin;
  for (; at < modules.size(); ++at) {
    const Module& m = *modules[at];
    // Exactly these classes: a subclass may compute something else.
    const std::type_info& type = typeid(m);
    if (type == typeid(Conv) || type == typeid(Conv1d) || type == typeid(Conv2d) ||
        type == typeid(Conv3d)) {
      layers.emplace_back(static_cast<const Conv&>(m).chain_layer());
    } else if (type == typeid(GroupNorm)) {
      layers.emplace_back(static_cast<const GroupNorm&>(m).chain_layer());
    } else if (type == typeid(InstanceNorm) && !layers.empty()) {
      // The channels the layers before it give (the run starts with a Conv).
      layers.emplace_back(static_cast<const InstanceNorm&>(m).chain_layer(channels_after(layers)));
    } else if (type == typeid(ReLU) && !layers.empty() &&
               std::holds_alternative<ChainGroupNorm>(layers.back())) {
      std::get<ChainGroupNorm>(layers.back()).relu = true;
    } else {
      break;
    }
  }
  return at;
}

}  // namespace

DTensor forward_fusing_halos(const std::vector<std::shared_ptr<Module>>& modules,
                             const DTensor& input) {
  DTensor x = input;
  std::size_t i = 0;
  while (i < modules.size()) {
    std::vector<ChainLayer> layers;
    const std::size_t end = chain_run(modules, i, layers);
    if (end > i + 1 && halo_chain_pays(x, layers)) {
      x = halo_chain(x, layers);
      i = end;
    } else {
      x = modules[i++]->forward(x);
    }
  }
  return x;
}

}  // namespace dtensor::nn
