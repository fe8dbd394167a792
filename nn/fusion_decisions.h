// Which runs of a module list fuse their halo exchanges, remembered per list
// and input layout (forward_fusing_halos, halo_region.h).
//
// Finding a run tries it from the longest down, a plan and a cost per try:
// for a list of L modules that is O(L^2) tries, more than the layers
// themselves cost once lists are deep (40 conv / norm / relu blocks on small
// tiles: 40 ms a forward), and the answer is the same on every call with the
// same modules and input layout. So it is found once and then looked up.
//
// A remembered run is only a choice: forward_fusing_halos checks it again
// (halo_chain_pays) before fusing, so a module changed since (its dtype, say)
// can cost a search, never a wrong result. Entries hold the modules weakly:
// one that died never matches a new module at its address. Every rank calls
// with the same lists in the same order, so every rank finds and misses
// alike, and chooses alike.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "dtensor/nn/module.h"

namespace dtensor::nn::detail {

class FusionDecisions {
 public:
  /// The decisions for `modules`: those remembered, or a fresh entry.
  explicit FusionDecisions(const std::vector<std::shared_ptr<Module>>& modules);

  /// The end of the run that fuses from `begin` on `input` (== begin: none
  /// does), as found before; nullopt: not known yet.
  std::optional<std::size_t> lookup(std::size_t begin, const DTensor& input) const;
  /// Records what the search found (in place of what was known before).
  void remember(std::size_t begin, const DTensor& input, std::size_t end);

  struct List;

 private:
  std::shared_ptr<List> list_;
};

}  // namespace dtensor::nn::detail
