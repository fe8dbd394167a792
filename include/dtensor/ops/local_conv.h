// The local (single-process) convolution the convolution handlers call.
//
// The handlers know halos and placements, never primitives: they ask for the
// kernels of a (device, dtype) and call the three passes below on their local
// window. The arithmetic is in the kernel table's conv.forward,
// conv.backward_data and conv.backward_weights slots
// (dtensor/ops/kernels/conv.h), which backends (oneDNN, Eigen, cuDNN, a
// user's) register like every other kernel; this front checks the operands
// and answers the degenerate cases once for all of them.
#pragma once

#include <memory>
#include <string>

#include "dtensor/core/dtype.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/kernels/conv.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor {

/// The convolution of one (device type, dtype), through the kernel table.
///
/// The methods validate their operands (InvalidArgument naming the
/// parameter), expand the parameters, and answer the degenerate cases
/// themselves (an empty batch, channel or spatial extent, e.g. a halo window
/// wholly in the padding) so that a kernel only implements the dense case.
/// All tensors are NC(D)HW; padding may be asymmetric; results are fresh
/// contiguous tensors of the operands' dtype.
class LocalConvKernels {
 public:
  LocalConvKernels(DeviceType device, DType dtype) : device_(device), dtype_(dtype) {}

  /// "cpu f32", for messages.
  std::string name() const;

  /// y = conv(x, w) + b. `b` may be an undefined Tensor (no bias).
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& params) const;

  /// grad_input of shape `input_shape` from grad_output and the weight.
  Tensor backward_data(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                       const ConvParams& params) const;

  /// grad_weight of shape `weight_shape` (and grad_bias [OC] when `want_bias`).
  ConvWeightGrads backward_weights(const Tensor& grad_out, const Tensor& x,
                                   const Shape& weight_shape, const ConvParams& params,
                                   bool want_bias) const;

  /// The same passes with the input (forward, backward_weights) or the input
  /// gradient (backward_data) held in tiles: the halo convolution passes its
  /// window as the rank's shard plus the received strips, and gets the
  /// window's gradient written straight into the owned gradient and the
  /// strips that go back. Input tiles must cover the tensor; backward_data
  /// writes every tile (regions without a tile are not computed for anyone).
  Tensor forward(const TiledTensor& x, const Tensor& w, const Tensor& b,
                 const ConvParams& params) const;
  void backward_data(const Tensor& grad_out, const Tensor& w, const TiledTensor& grad_input,
                     const ConvParams& params) const;
  /// forward, written into `out` (a view with the output's shape, any
  /// strides) instead of a fresh tensor.
  void forward_into(const TiledTensor& x, const Tensor& w, const Tensor& b,
                    const ConvParams& params, const Tensor& out) const;
  ConvWeightGrads backward_weights(const Tensor& grad_out, const TiledTensor& x,
                                   const Shape& weight_shape, const ConvParams& params,
                                   bool want_bias) const;

 private:
  DeviceType device_;
  DType dtype_;
};

/// The convolution of (device, dtype). Throws NotSupported naming both when
/// no conv.forward kernel is registered for them (e.g. CUDA in a build
/// without it).
std::shared_ptr<LocalConvKernels> local_conv_kernels(Device device, DType dtype);

/// Whether convolution kernels are registered for (device, dtype).
bool has_local_conv_kernels(DeviceType device, DType dtype);

}  // namespace dtensor
