// F.linear on DTensors: y = input weight^T + bias over the input's last dim,
// forward and backward.
//
// input [..., in] in any placement; weight [K, in] and bias [K] are
// replicated (moved there if they are not). The output [..., K] keeps the
// input's shards of every dim but the last; an input sharded along its last
// (feature) dim is gathered along it first, and a Partial input is reduced
// first (the bias must be added once). The local product is the kernel slot
// of dtensor/ops/kernels/linear.h.
#pragma once

#include <optional>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

DTensor linear(const DTensor& input, const DTensor& weight,
               const std::optional<DTensor>& bias = std::nullopt);

struct LinearGrads {
  DTensor grad_input;                  // placed like the input
  DTensor grad_weight;                 // replicated: every rank's rows summed
  std::optional<DTensor> grad_bias{};  // the same; none without a bias
};
/// grad_input = grad_output weight; grad_weight = grad_output^T input and
/// grad_bias = grad_output summed over every row, all-reduced over the mesh
/// dims that shard the rows.
LinearGrads linear_backward(const DTensor& grad_output, const DTensor& input, const DTensor& weight,
                            bool has_bias = true);

}  // namespace dtensor
