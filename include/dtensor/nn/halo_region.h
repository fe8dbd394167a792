// Modules whose halo exchanges are fused: a chain of convolutions, group
// and batch norms, activations, pools, upsamples and transposed
// convolutions exchanges its combined halo once, forward and
// backward (dtensor/ops/halo_chain.h), wherever the input is spatially sharded, the chain fits and
// the cost model says it pays; otherwise the modules run one by one. Either way the results are the
// same (to rounding).
#pragma once
#include <memory>
#include <vector>

#include "dtensor/nn/module.h"

namespace dtensor::nn {

/// `modules` applied in order to `input`. Every run of Conv (as
/// halo_chain_refusal() accepts), GroupNorm,
/// InstanceNorm (a group norm with a group per channel), BatchNorm (its
/// running statistics updated as its forward() updates them), ReLU (after a
/// norm: its fused activation), LeakyReLU, GELU, SiLU, Sigmoid, Tanh, MaxPool,
/// AvgPool, Upsample and ConvTranspose, that starts with a Conv and holds
/// two or more window layers (convolutions, pools, upsamples, transposed
/// convolutions) runs as one halo_chain() when halo_chain_pays() (a Pad right
/// before a Conv that pads nothing itself counts as that Conv padded in the
/// Pad's mode); where the run does not fuse whole (refused, or not paying),
/// it is tried one module shorter at a time, and the rest starts a run of
/// its own; everything else runs module by module. The runs found are
/// remembered per module list (held weakly, with each module's train / eval
/// mode), input layout, message cost and simulated link, and one that fuses
/// is checked again before it runs (docs/halo.md, "Found once per layout").
/// What nn::Sequential and nn::HaloRegion do.
DTensor forward_fusing_halos(const std::vector<std::shared_ptr<Module>>& modules,
                             const DTensor& input);

/// A chain of modules wrapped as one: a Sequential (modules named "0", "1",
/// ...), whose forward fuses the chain's halo exchanges where it pays. For a
/// user module whose forward is such a chain: wrap the chain in a
/// HaloRegion, or call forward_fusing_halos() from forward() with the
/// modules it holds (the trainer's DoubleConv does).
struct HaloRegion : Sequential {
  using Sequential::Sequential;
};

}  // namespace dtensor::nn
