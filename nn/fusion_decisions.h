// Which runs of a module list fuse their halo exchanges, remembered per list
// and input layout (forward_fusing_halos, halo_region.h).
//
// Finding a run tries it from the longest down, a price and a plan per try:
// for a list of L modules that is O(L^2) tries, more than the layers
// themselves cost once lists are deep, and the answer is the same on every
// call with the same modules and input layout. So it is found once and then
// looked up.
//
// A decision is remembered under everything it reads: the modules (held
// weakly: one that died never matches a new module at its address) with
// their train / eval mode, the input's layout (shape, dtype, placements, and
// the mesh by its device type, shape and ranks: no group is kept alive), the
// mesh's message cost and the simulated link. What else it reads is the
// parameters' layout, which Module::distribute() and Module::to() change:
// they forget every decision (forget_fusion_decisions). So a decision looked
// up is the one a search would make, on every rank, whatever each rank
// remembered before. (A layout changed behind the modules' back, through
// named_parameters(), is not seen: docs/halo.md, "Found once per layout".)
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
  /// Records what the search found.
  void remember(std::size_t begin, const DTensor& input, std::size_t end);

  struct List;

 private:
  std::shared_ptr<List> list_;
};

/// Forgets every decision (a parameter's layout changed).
void forget_fusion_decisions();

}  // namespace dtensor::nn::detail
