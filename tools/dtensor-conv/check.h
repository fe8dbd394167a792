// --check: every result against the naive f64 oracle (tools/reference), which
// shares no code with the halo path, the local kernels or the shape helpers.
#pragma once

#include <string>
#include <vector>

#include "tools/dtensor-conv/options.h"
#include "tools/dtensor-conv/problem.h"

namespace dtensor::conv_cli {

struct TensorCheck {
  std::string name;  // "output", "grad_input", "grad_weight", "grad_bias"
  double max_abs_err = 0;
  double tolerance = 0;
  double ref_max = 0;  // max |reference|, the scale of the tolerance
  bool ok = false;
};

/// Compares each defined result of `g` with the oracle run on g's operands
/// (converted to f64, so both see the same rounded values). Local: rank 0
/// calls it; `ranks` bounds the Partial contributions (the world size).
std::vector<TensorCheck> check_against_reference(const Options& o, const GlobalTensors& g,
                                                 int ranks);

}  // namespace dtensor::conv_cli
