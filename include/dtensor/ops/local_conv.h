// The local (single-process) convolution kernels the convolution handler calls.
//
// The handler knows halos and placements, never primitives (docs/design.md §3): it
// asks the registry for the kernels of a (device, dtype) and calls the three
// passes below on its local window. Backends (oneDNN, Eigen, cuDNN, a user's)
// derive from LocalConvKernels and register themselves.
#pragma once

#include <memory>
#include <string>

#include "dtensor/core/dtype.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor {

/// Result of backward_weights. grad_bias is undefined unless it was requested.
struct ConvWeightGrads {
  Tensor grad_weight{};
  Tensor grad_bias{};
};

/// One backend's convolution for one (device, dtype).
///
/// The public methods validate their operands (InvalidArgument naming the
/// parameter), make them contiguous, expand the parameters, and answer the
/// degenerate cases themselves (an empty batch, channel or spatial extent, e.g.
/// a halo window wholly in the padding) so that a backend only implements the
/// dense case. All tensors are NC(D)HW; padding may be asymmetric; results are
/// fresh contiguous tensors of the operands' dtype.
class LocalConvKernels {
 public:
  virtual ~LocalConvKernels() = default;

  /// Backend name for messages and logs, e.g. "onednn", "eigen".
  virtual std::string name() const = 0;

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
  /// strides) instead of a fresh tensor: the halo convolution computes its
  /// interior outputs while halos are in flight, then the boundary ones, into
  /// one output.
  void forward_into(const TiledTensor& x, const Tensor& w, const Tensor& b,
                    const ConvParams& params, const Tensor& out) const;
  ConvWeightGrads backward_weights(const Tensor& grad_out, const TiledTensor& x,
                                   const Shape& weight_shape, const ConvParams& params,
                                   bool want_bias) const;

 protected:
  // The dense cases. Operands are contiguous, of one dtype and device, shapes
  // validated, `params` expanded to the spatial rank, and every extent >= 1.
  virtual Tensor forward_impl(const Tensor& x, const Tensor& w, const Tensor& b,
                              const ConvParams& params) const = 0;
  virtual Tensor backward_data_impl(const Tensor& grad_out, const Tensor& w,
                                    const Shape& input_shape, const ConvParams& params) const = 0;
  virtual ConvWeightGrads backward_weights_impl(const Tensor& grad_out, const Tensor& x,
                                                const Shape& weight_shape, const ConvParams& params,
                                                bool want_bias) const = 0;

  // The tiled dense cases. The defaults assemble the input (or compute the
  // whole gradient and scatter it): a backend overrides them when it can read
  // or write tiles in place. Weight, bias and grad_output are contiguous;
  // tiles may have any strides.
  virtual Tensor forward_tiled_impl(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                    const ConvParams& params) const;
  virtual void forward_into_impl(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                 const ConvParams& params, const Tensor& out) const;
  virtual void backward_data_tiled_impl(const Tensor& grad_out, const Tensor& w,
                                        const TiledTensor& grad_input,
                                        const ConvParams& params) const;
  virtual ConvWeightGrads backward_weights_tiled_impl(const Tensor& grad_out, const TiledTensor& x,
                                                      const Shape& weight_shape,
                                                      const ConvParams& params,
                                                      bool want_bias) const;
};

/// Installs `kernels` for (device, dtype), replacing any earlier registration
/// (so a user or a test can substitute its own).
void register_local_conv_kernels(DeviceType device, DType dtype,
                                 std::shared_ptr<LocalConvKernels> kernels);

/// The kernels for (device, dtype). Throws NotSupported naming both when none
/// is registered (e.g. CUDA in a build without it).
std::shared_ptr<LocalConvKernels> local_conv_kernels(Device device, DType dtype);

/// Whether kernels are registered for (device, dtype).
bool has_local_conv_kernels(DeviceType device, DType dtype);

}  // namespace dtensor
