// The kernel slots of the convolution's three passes: forward, backward-data
// and backward-weights, registered by backends per (device, dtype) in the one
// kernel table like every other slot (oneDNN for CPU f32 and bf16, f16
// computed through the f32 kernels, Eigen for f64, cuDNN for CUDA).
//
// Callers go through LocalConvKernels (dtensor/ops/local_conv.h), which
// validates the operands (InvalidArgument naming the parameter), expands the
// parameters to the spatial rank, answers the degenerate cases (an empty
// batch, channel or spatial extent, a halo window wholly in the padding) and
// allocates the outputs, so a kernel sees only the dense case: every extent
// >= 1, tensors NC(D)HW of the slot's dtype and device, weight, bias and
// grad_output contiguous, padding possibly asymmetric. The window operand
// comes in tiles (the halo convolution's shard plus received strips, any
// strides); a kernel that cannot read tiles assembles them
// (register_dense_conv_kernels below does that for it).
#pragma once

#include <functional>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor {

/// Result of a backward-weights pass. grad_bias is undefined unless requested.
struct ConvWeightGrads {
  Tensor grad_weight{};
  Tensor grad_bias{};
};

namespace kernels {

/// output = conv(input, weight) + bias (bias undefined: none). `output` has
/// the output's shape and any strides (the halo convolution writes a view).
struct ConvForwardArgs {
  TiledTensor input;
  Tensor weight, bias;
  ConvParams params;
  Tensor output;  // out
};
/// grad_input = the input's gradient from grad_output and the weight, written
/// into every tile of grad_input (the owned gradient and the strips that go
/// back to the peers); regions without a tile are not computed for anyone.
struct ConvBackwardDataArgs {
  Tensor grad_output, weight;
  ConvParams params;
  TiledTensor grad_input;  // out
};
/// grad_weight (and grad_bias when defined: [OC]) from grad_output and the
/// input; both contiguous, of the input's dtype.
struct ConvBackwardWeightsArgs {
  Tensor grad_output;
  TiledTensor input;
  ConvParams params;
  Tensor grad_weight, grad_bias;  // out
};

inline constexpr KernelSlot<ConvForwardArgs> kConvForward{"conv.forward"};
inline constexpr KernelSlot<ConvBackwardDataArgs> kConvBackwardData{"conv.backward_data"};
inline constexpr KernelSlot<ConvBackwardWeightsArgs> kConvBackwardWeights{"conv.backward_weights"};

/// A backend's passes on whole tensors (the dense case, contiguous operands),
/// each returning a fresh result.
struct DenseConvPasses {
  std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p)>
      forward;
  std::function<Tensor(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                       const ConvParams& p)>
      backward_data;
  std::function<ConvWeightGrads(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                const ConvParams& p, bool want_bias)>
      backward_weights;
};

/// The three slots' kernels made of `passes` (tiled inputs assembled first,
/// results copied into the outputs), for a backend that registers them
/// itself; register_dense_conv_kernels registers them.
struct DenseConvKernels {
  KernelFunction<ConvForwardArgs> forward;
  KernelFunction<ConvBackwardDataArgs> backward_data;
  KernelFunction<ConvBackwardWeightsArgs> backward_weights;
};
DenseConvKernels dense_conv_kernels(DenseConvPasses passes);

/// Registers `passes` for the three slots on (device, dtype): tiled inputs are
/// assembled first, results copied into the outputs and the input gradient
/// scattered into its tiles. For backends that read only whole tensors.
void register_dense_conv_kernels(DeviceType device, DType dtype, DenseConvPasses passes,
                                 bool override_existing = false);

}  // namespace kernels
}  // namespace dtensor
