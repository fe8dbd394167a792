#include "dtensor/nn/halo_region.h"

#include <algorithm>
#include <optional>
#include <typeinfo>

#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/nn/layers.h"
#include "dtensor/ops/halo_chain.h"
#include "nn/fusion_decisions.h"

namespace dtensor::nn {
namespace {

// The channels the last convolution or transposed convolution of `layers`
// gives (0 when none).
std::int64_t channels_after(const std::vector<ChainLayer>& layers) {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (const auto* c = std::get_if<ChainConv>(&*it)) return c->weight.shape()[0];
    if (const auto* t = std::get_if<ChainConvTranspose>(&*it))
      return t->weight.shape()[1] * t->params.groups;
  }
  return 0;
}

// Exactly these classes: a subclass may compute something else.
bool is_conv(const Module& m) {
  const std::type_info& type = typeid(m);
  return type == typeid(Conv) || type == typeid(Conv1d) || type == typeid(Conv2d) ||
         type == typeid(Conv3d);
}
bool is_conv_transpose(const Module& m) {
  const std::type_info& type = typeid(m);
  return type == typeid(ConvTranspose) || type == typeid(ConvTranspose1d) ||
         type == typeid(ConvTranspose2d) || type == typeid(ConvTranspose3d);
}

// A Pad right before a Conv that pads nothing itself, as one convolution
// padded in the Pad's mode: F.pad then a "valid" convolution is what a
// padded convolution computes. Not a constant padding of another value
// than zero, nor a negative one (a crop).
std::optional<ChainConv> padded_conv(const Pad& pad, const Module& next) {
  if (!is_conv(next)) return std::nullopt;
  ChainConv c = static_cast<const Conv&>(next).chain_layer();
  const std::int64_t spatial = c.weight.ndim() - 2;
  const ConvParams own = c.params.expanded(spatial);
  const bool pads_itself = own.padding_mode != PaddingMode::Zeros ||
                           std::any_of(own.padding.begin(), own.padding.end(),
                                       [](const auto& p) { return p.first != 0 || p.second != 0; });
  if (pads_itself || (pad.mode() == PadMode::Constant && pad.value() != 0.0)) return std::nullopt;
  ConvParams::Padding padding = pad.padding();
  if (padding.size() == 1) padding.assign(static_cast<std::size_t>(spatial), padding.front());
  if (static_cast<std::int64_t>(padding.size()) != spatial ||
      std::any_of(padding.begin(), padding.end(),
                  [](const auto& p) { return p.first < 0 || p.second < 0; }))
    return std::nullopt;
  c.params = own;
  c.params.padding = std::move(padding);
  c.params.padding_mode = padding_mode_of(pad.mode());
  return c;
}

// A MaxPool or AvgPool as a chain layer (after a Conv), of any stride and
// padding (the U-Net's way down); halo_chain_refusal has the last word.
std::optional<ChainPool> pool_of(const Module& m, const std::vector<ChainLayer>& layers) {
  const std::type_info& type = typeid(m);
  if (type != typeid(MaxPool) && type != typeid(AvgPool)) return std::nullopt;
  const auto first_conv = std::find_if(layers.begin(), layers.end(), [](const ChainLayer& l) {
    return std::holds_alternative<ChainConv>(l);
  });
  if (first_conv == layers.end()) return std::nullopt;  // a chain starts with a Conv
  ChainPool pool = type == typeid(MaxPool) ? static_cast<const MaxPool&>(m).chain_layer()
                                           : static_cast<const AvgPool&>(m).chain_layer();
  try {
    (void)pool.params.expanded(std::get<ChainConv>(*first_conv).weight.ndim() - 2);
  } catch (const InvalidArgument&) {
    return std::nullopt;  // run alone, it names its bad list itself
  }
  return pool;
}

// The relu flag of the norm that ends `layers`, or null.
bool* norm_relu(std::vector<ChainLayer>& layers) {
  if (layers.empty()) return nullptr;
  if (auto* g = std::get_if<ChainGroupNorm>(&layers.back())) return &g->relu;
  if (auto* b = std::get_if<ChainBatchNorm>(&layers.back())) return &b->relu;
  return nullptr;
}

// The activation modules, as chain layers.
std::optional<ChainActivation> activation_of(const Module& m) {
  const std::type_info& type = typeid(m);
  if (type == typeid(ReLU)) return ChainActivation{"relu"};
  if (type == typeid(LeakyReLU))
    return ChainActivation{"leaky_relu", static_cast<const LeakyReLU&>(m).slope};
  if (type == typeid(GELU))
    return ChainActivation{"gelu", 0.01, static_cast<const GELU&>(m).approximate};
  if (type == typeid(SiLU)) return ChainActivation{"silu"};
  if (type == typeid(Sigmoid)) return ChainActivation{"sigmoid"};
  if (type == typeid(Tanh)) return ChainActivation{"tanh"};
  return std::nullopt;
}

// A place a run of modules can end: the module after it, and the layers,
// updating BatchNorms and folded ReLU the run holds up to there.
struct RunEnd {
  std::size_t at, layers, updating;
  bool relu;  // whether the last layer, a norm, has a ReLU folded in
};

// The run of chainable modules from `begin`: its layers, the BatchNorms in
// it that update their running statistics (in order), and where it ends.
// An InstanceNorm is a group norm with a group per channel; a ReLU folds into
// the norm before it (relu(norm(x)) is its fused activation); the
// activations join as layers of their own, as do the pools (pool_of) and
// the Upsamples and ConvTransposes after a Conv (halo_chain_refusal has the
// last word); a
// Pad joins the Conv after it (padded_conv). The run ends at `limit` at
// the latest. With `ends`, each place the run could end is recorded in it
// (RunEnd), in order.
std::size_t chain_run(const std::vector<std::shared_ptr<Module>>& modules, std::size_t begin,
                      std::size_t limit, std::vector<ChainLayer>& layers,
                      std::vector<BatchNorm*>& updating, std::vector<RunEnd>* ends = nullptr) {
  std::size_t at = begin;
  for (; at < limit; ++at) {
    const Module& m = *modules[at];
    const std::type_info& type = typeid(m);
    if (is_conv(m)) {
      layers.emplace_back(static_cast<const Conv&>(m).chain_layer());
    } else if (type == typeid(Pad) && at + 1 < limit) {
      std::optional<ChainConv> conv = padded_conv(static_cast<const Pad&>(m), *modules[at + 1]);
      if (!conv) break;
      layers.emplace_back(std::move(*conv));
      ++at;  // the Conv is in it
    } else if (type == typeid(GroupNorm)) {
      layers.emplace_back(static_cast<const GroupNorm&>(m).chain_layer());
    } else if (type == typeid(BatchNorm)) {
      ChainBatchNorm b = static_cast<const BatchNorm&>(m).chain_layer();
      auto* module = static_cast<BatchNorm*>(modules[at].get());
      // The same module twice would update from its statistics before the
      // run both times: the run ends before its second use.
      if (b.updates_running_stats()) {
        if (std::find(updating.begin(), updating.end(), module) != updating.end()) break;
        updating.push_back(module);
      }
      layers.emplace_back(std::move(b));
    } else if (type == typeid(InstanceNorm) && !layers.empty()) {
      // The channels the layers before it give (the run starts with a Conv).
      layers.emplace_back(static_cast<const InstanceNorm&>(m).chain_layer(channels_after(layers)));
    } else if (bool* relu = type == typeid(ReLU) ? norm_relu(layers) : nullptr; relu && !*relu) {
      *relu = true;
    } else if (std::optional<ChainActivation> a = activation_of(m)) {
      layers.emplace_back(std::move(*a));
    } else if (std::optional<ChainPool> pool = pool_of(m, layers)) {
      layers.emplace_back(std::move(*pool));
    } else if (type == typeid(Upsample) && !layers.empty()) {
      layers.emplace_back(static_cast<const Upsample&>(m).chain_layer());
    } else if (is_conv_transpose(m) && !layers.empty()) {
      layers.emplace_back(static_cast<const ConvTranspose&>(m).chain_layer());
    } else {
      break;
    }
    if (ends) {
      const bool* relu = norm_relu(layers);
      ends->push_back({at + 1, layers.size(), updating.size(), relu && *relu});
    }
  }
  return at;
}

// The run cut back to `end`, one of the places chain_run recorded: the
// layers and BatchNorms after it dropped, and a ReLU after it unfolded from
// the norm before it.
void cut_run(const RunEnd& end, std::vector<ChainLayer>& layers,
             std::vector<BatchNorm*>& updating) {
  layers.erase(layers.begin() + static_cast<std::ptrdiff_t>(end.layers), layers.end());
  updating.resize(end.updating);
  if (bool* relu = norm_relu(layers)) *relu = end.relu;
}

// Whether a run from `begin` could fuse at all: it starts with a Conv, or
// a Pad right before one (chain_run's first layer is then a convolution).
bool starts_chain(const std::vector<std::shared_ptr<Module>>& modules, std::size_t begin) {
  if (begin + 1 >= modules.size()) return false;  // a chain holds two window layers
  const Module& m = *modules[begin];
  return is_conv(m) || (typeid(m) == typeid(Pad) && is_conv(*modules[begin + 1]));
}

// The end of the longest run from `begin` that fuses and pays on `x`, with
// its layers (and updating BatchNorms) in `layers` / `updating`; `begin`:
// none does.
std::size_t search_run(const std::vector<std::shared_ptr<Module>>& modules, std::size_t begin,
                       const DTensor& x, std::vector<ChainLayer>& layers,
                       std::vector<BatchNorm*>& updating) {
  // The whole run built once, then cut back end by end (building it again
  // for every end cost more than the tries themselves on deep lists).
  std::vector<RunEnd> ends;
  chain_run(modules, begin, modules.size(), layers, updating, &ends);
  for (auto end = ends.rbegin(); end != ends.rend() && end->at > begin + 1; ++end) {
    cut_run(*end, layers, updating);
    if (halo_chain_pays(x, layers)) return end->at;
  }
  layers.clear();
  updating.clear();
  return begin;
}

// Each decision once, where it is made (it is remembered after): which
// modules run as one exchange on which input, and what the cost model
// prices it at; at debug level, so a user can see what fuses and why.
void log_decision(std::size_t count, std::size_t begin, std::size_t end, const DTensor& x,
                  const std::vector<ChainLayer>& layers) {
  if (!log::logger()->should_log(spdlog::level::debug)) return;
  if (end > begin + 1) {
    log::debug(
        "halo fusion: modules {}-{} of {} run as one exchange on {} (the cost model saves "
        "{:.1f} us a step)",
        begin, end - 1, count, x.spec().str(), halo_chain_saving(x, layers) * 1e6);
  } else {
    log::debug("halo fusion: no run from module {} of {} fuses and pays on {}", begin, count,
               x.spec().str());
  }
}

}  // namespace

DTensor forward_fusing_halos(const std::vector<std::shared_ptr<Module>>& modules,
                             const DTensor& input) {
  DTensor x = input;
  if (!config().halo_fusion) {
    for (const auto& m : modules)
      x = m->forward(x);
    return x;
  }
  std::optional<detail::FusionDecisions> decisions;  // made at the first run that may fuse
  std::size_t i = 0;
  while (i < modules.size()) {
    // The longest run from i that fuses and pays (fusion_decisions.h): as
    // found before for this input layout (one that fuses checked again:
    // cheap, and a parameter changed behind the modules' back costs a
    // search, not a refused chain); else searched,
    // the whole run first, then one module shorter at a time (a layer the
    // refusal or the cost model objects to is left to the next run). Not
    // tried at all where the input rules fusion out, or the run does not
    // start with a convolution (nor would any shorter one).
    std::vector<ChainLayer> layers;
    std::vector<BatchNorm*> updating;
    std::size_t end = i;
    if (starts_chain(modules, i) && !halo_chain_input_refusal(x)) {
      if (!decisions) decisions.emplace(modules);
      std::optional<std::size_t> known = decisions->lookup(i, x);
      if (known && *known > i + 1 &&
          (chain_run(modules, i, *known, layers, updating) != *known ||
           !halo_chain_pays(x, layers))) {
        layers.clear();
        updating.clear();
        known.reset();
      }
      if (known) {
        end = *known;
      } else {
        end = search_run(modules, i, x, layers, updating);
        decisions->remember(i, x, end);
        log_decision(modules.size(), i, end, x, layers);
      }
    }
    if (end > i + 1) {
      HaloChainResult r = halo_chain_updating(x, layers);
      for (std::size_t k = 0; k < updating.size(); ++k)
        updating[k]->take_running_stats(r.running_stats.at(k).first, r.running_stats.at(k).second);
      x = std::move(r.output);
      i = end;
    } else {
      x = modules[i++]->forward(x);
    }
  }
  return x;
}

}  // namespace dtensor::nn
