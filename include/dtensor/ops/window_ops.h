// The window operators other than convolution, on DTensors, forward and
// backward, for 1, 2 and 3 spatial dims: transposed convolution, max and
// average pooling, adaptive pooling, and padding with a boundary mode.
//
// Semantics and defaults are torch.nn.functional's. Every operator runs on
// the window engine (dtensor/ops/window.h): on a spatially sharded dim each
// rank receives the input its outputs read from the ranks that own it, and
// the backward returns the window's gradient to them; the output is sharded
// by the chunk rule on the OUTPUT extent, so full_tensor() is the
// single-process result. Batch sharding (and channel sharding where the
// operator is per channel) needs no communication.
//
// Lists (kernel, stride, ...) take one entry for every spatial dim or one per
// dim. Padding is a (left, right) pair per dim; PyTorch's symmetric padding
// is {p, p}. Argument layouts: docs/operators.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor {

// ---- transposed convolution -------------------------------------------------

/// torch.nn.functional.conv_transpose{1,2,3}d's parameters. Output length per
/// dim: (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
struct ConvTransposeParams {
  std::vector<std::int64_t> stride{1};
  std::vector<std::int64_t> padding{0};  // symmetric, as PyTorch's
  std::vector<std::int64_t> output_padding{0};
  std::vector<std::int64_t> dilation{1};
  std::int64_t groups = 1;

  /// Every list spelled out for `spatial_dims` dims (InvalidArgument naming
  /// the list whose length is neither 0, 1 nor `spatial_dims`).
  ConvTransposeParams expanded(std::int64_t spatial_dims) const;
  std::string str() const;
  bool operator==(const ConvTransposeParams&) const = default;
};

/// y = conv_transpose(input, weight) + bias. input [N, C_in, spatial...],
/// weight [C_in, C_out/groups, k...], bias [C_out] or none.
DTensor conv_transpose(const DTensor& input, const DTensor& weight,
                       const std::optional<DTensor>& bias, const ConvTransposeParams& params);

/// Gradients of conv_transpose given grad_output (placed as in ConvGrads).
ConvGrads conv_transpose_backward(const DTensor& grad_output, const DTensor& input,
                                  const DTensor& weight, const ConvTransposeParams& params,
                                  const ConvOutputMask& mask = {});

/// [N, C_out, O...] (validates as conv_transpose does).
Shape conv_transpose_output_shape(const Shape& input, const Shape& weight,
                                  const ConvTransposeParams& params);

// ---- pooling -------------------------------------------------------------------

/// torch.nn.functional.{max,avg}_pool{1,2,3}d's parameters. An empty stride
/// means the kernel (PyTorch's default). Padding may be asymmetric (left,
/// right); each side at most half the kernel size, as PyTorch requires.
struct PoolParams {
  std::vector<std::int64_t> kernel{1};
  std::vector<std::int64_t> stride{};  // empty: = kernel
  ConvParams::Padding padding{{0, 0}};
  std::vector<std::int64_t> dilation{1};  // max_pool only (avg_pool: 1)
  bool ceil_mode = false;
  bool count_include_pad = true;                   // avg_pool
  std::optional<std::int64_t> divisor_override{};  // avg_pool

  PoolParams expanded(std::int64_t spatial_dims) const;
  std::string str() const;
  bool operator==(const PoolParams&) const = default;
};

/// Output length of a pool along one dim (PyTorch's pooling_output_shape:
/// with ceil_mode, a last window that would start in the right padding is
/// dropped).
std::int64_t pool_output_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                                std::int64_t dilation, std::int64_t pad_left,
                                std::int64_t pad_right, bool ceil_mode);

DTensor max_pool(const DTensor& input, const PoolParams& params);
/// The gradient goes to the element PyTorch picks: the first maximum in
/// window order, or the last NaN when the window holds one.
DTensor max_pool_backward(const DTensor& grad_output, const DTensor& input,
                          const PoolParams& params);
DTensor avg_pool(const DTensor& input, const PoolParams& params);
DTensor avg_pool_backward(const DTensor& grad_output, const DTensor& input,
                          const PoolParams& params);

/// Adaptive pools: output window i spans [floor(i*L/O), ceil((i+1)*L/O)).
DTensor adaptive_avg_pool(const DTensor& input, const std::vector<std::int64_t>& output_size);
DTensor adaptive_avg_pool_backward(const DTensor& grad_output, const DTensor& input,
                                   const std::vector<std::int64_t>& output_size);
DTensor adaptive_max_pool(const DTensor& input, const std::vector<std::int64_t>& output_size);
DTensor adaptive_max_pool_backward(const DTensor& grad_output, const DTensor& input,
                                   const std::vector<std::int64_t>& output_size);

/// torch.nn.functional.lp_pool{1,2,3}d: the power-average of each window,
/// (sum of x^p over the window)^(1/p) with p = norm_type, no padding, the
/// stride the kernel's when empty. Composed as PyTorch composes it:
/// avg_pool of x^p (a ceil_mode window that runs past the input is averaged
/// over its inputs) times the kernel's size, to the power 1/p; so it runs
/// on every placement avg_pool does, exchanging what avg_pool exchanges.
/// norm_type must be finite and > 0 (InvalidArgument naming norm_type); x^p
/// of a negative x is NaN unless p is an integer, as in PyTorch.
DTensor lp_pool(const DTensor& input, double norm_type, const std::vector<std::int64_t>& kernel,
                const std::vector<std::int64_t>& stride = {}, bool ceil_mode = false);
DTensor lp_pool_backward(const DTensor& grad_output, const DTensor& input, double norm_type,
                         const std::vector<std::int64_t>& kernel,
                         const std::vector<std::int64_t>& stride = {}, bool ceil_mode = false);

// ---- padding -------------------------------------------------------------------

/// torch.nn.functional.pad's modes. On a sharded dim the reflected,
/// replicated or wrapped values come from the ranks that own them; circular
/// wraps around the whole (global) dim, never around a shard.
enum class PadMode { Constant, Reflect, Replicate, Circular };
std::string_view pad_mode_name(PadMode m);
/// The padding mode a convolution pads with as the padding does (constant
/// padding as zeros: its value is the caller's to check).
PaddingMode padding_mode_of(PadMode m);

/// Pads the spatial dims: `padding` is one (left, right) pair for every
/// spatial dim or one per dim (in dim order, unlike F.pad's last-dim-first
/// list). Constant padding may be negative (crops), as in PyTorch; reflect
/// needs each side < L, circular <= L, replicate L >= 1.
DTensor pad(const DTensor& input, const ConvParams::Padding& padding,
            PadMode mode = PadMode::Constant, double value = 0.0);
DTensor pad_backward(const DTensor& grad_output, const DTensor& input,
                     const ConvParams::Padding& padding, PadMode mode = PadMode::Constant);

}  // namespace dtensor
