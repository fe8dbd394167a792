// Convolution on DTensors, forward and backward, for 1, 2 and 3 spatial dims.
//
// Registered through the public registry like any user operator ("convolution",
// "convolution_backward"): strategies for batch, spatial (halo exchange),
// channel, filter and replicated parallelism, and custom handlers that run
// the tensor-parallel (halo-exchange) algorithm of docs/halo.md.
#pragma once

#include <optional>

#include "dtensor/ops/conv_params.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// y = conv(input, weight) + bias. input [N, C, spatial...], weight
/// [OC, C/groups, k...], bias [OC] or none. The output is sharded by the chunk
/// rule on the OUTPUT extent, so full_tensor() is the single-process result.
DTensor convolution(const DTensor& input, const DTensor& weight, const std::optional<DTensor>& bias,
                    const ConvParams& params);

/// Which gradients convolution_backward computes.
struct ConvOutputMask {
  bool input = true;
  bool weight = true;
  bool bias = true;
};

struct ConvGrads {
  std::optional<DTensor> grad_input{};   // placed like the input
  std::optional<DTensor> grad_weight{};  // Partial(sum) on the mesh dims that shard input or batch
  std::optional<DTensor> grad_bias{};    // likewise
};

/// Gradients of convolution(input, weight, bias?, params) given grad_output.
ConvGrads convolution_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& weight, const ConvParams& params,
                               const ConvOutputMask& mask = {});

}  // namespace dtensor
