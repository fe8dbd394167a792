// --check: every result of dtensor-op against the naive f64 oracles
// (tools/reference/reference_window_ops.h, reference_conv.h,
// reference_nn_ops.h), which share no code with the library's operators or
// its shape helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::op_cli {

struct TensorCheck {
  std::string name;  // "output", "grad_input", ...
  double max_abs_err = 0;
  double tolerance = 0;
  double ref_max = 0;  // max |reference|, the scale of the tolerance
  bool ok = false;
};

/// One result against the oracle's: the max abs error (infinite for a missing
/// result or a wrong shape) and dtensor-conv's tolerance for sums of `terms`
/// terms on `ranks` ranks, times `factor` where the result amplifies
/// rounding errors (the normalisations' 1 / std). `exact`: the result is a
/// selection or a copy of input values and must equal the oracle's bit for
/// bit.
TensorCheck compare(const std::string& name, const Tensor& got, const Tensor& ref,
                    std::int64_t terms, DType dtype, int ranks, bool exact = false,
                    double factor = 1.0);

/// Compares each result of `g` with the oracle run on g's operands (converted
/// to f64, so both see the same rounded values). Tolerances are dtensor-conv's
/// (tools/cli/tolerance.h) for the length of the sums behind one
/// value; the forward of the max pools (a selection) must be exact. Local:
/// rank 0 calls it; `ranks` bounds the Partial contributions.
std::vector<TensorCheck> check_against_reference(const Options& o, const GlobalTensors& g,
                                                 int ranks);

}  // namespace dtensor::op_cli
