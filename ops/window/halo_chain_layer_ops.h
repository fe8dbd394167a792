// A halo chain's window layers other than convolutions, and its
// activations, on local tensors over the ranges the rank computes: each by
// its operator's own kernel, with taps named by global position.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/kernels/pool.h"
#include "dtensor/ops/kernels/upsample.h"
#include "dtensor/ops/local_conv.h"
#include "ops/window/halo_chain_geometry.h"
#include "ops/window/halo_chain_layers.h"

namespace dtensor::halo::chain {

// An activation layer on local tensors ({x}, or {grad_output, x} for the
// backward), by its operator's own kernel (the same arithmetic as the
// layer run alone).
Tensor activation(const Layer& l, std::vector<OpArg> args, bool backward);

// Pool layer `l`'s taps per spatial dim: window layer k's outputs reading
// the range of the layer before it.
std::vector<kernels::PoolTaps> pool_taps_of(const Layer& l, const Geometry& g, int k,
                                            std::int64_t spatial);

// Upsample layer `l`'s taps per spatial dim, likewise (`backward`: PyTorch's
// backward index rule, resample_taps.h).
std::vector<kernels::ResampleTaps> resample_taps_of(const Layer& l, const Geometry& g, int k,
                                                    bool backward);

// A transposed convolution's full output of its held input along each dim:
// global outputs from in_begin * stride - padding on, which a convolution's
// backward-data with no padding computes (as conv_transpose alone does per
// tile); and where the layer's range starts in it.
struct TransposedSpan {
  std::vector<std::int64_t> length, offset;
};

TransposedSpan transposed_span(const Layer& l, const Geometry& g, int k);

// `t` ([N, C, the span...]) cut to the layer's range.
Tensor range_of_span(const Tensor& t, const TransposedSpan& span, const Geometry& g, int k);

Shape span_shape(std::int64_t batch, std::int64_t channels, const TransposedSpan& span);

// A transposed convolution layer on local tensors over its ranges: `x` its
// input, `y` its output (written).
void conv_transpose_forward(const Layer& l, const TransposedSpan& span,
                            const LocalConvKernels& kernels, const Tensor& w, const Tensor& bias,
                            const Tensor& x, Tensor y, const Geometry& g, int k);

// A pool layer on local tensors over its ranges ([N, C, spatial...]).
void pool_forward(const Layer& l, const std::vector<kernels::PoolTaps>& taps, const Tensor& x,
                  const Tensor& y);

// Its backward: the input's gradient `gx` (overwritten) from the output's
// `gy`; a halo cell's is this rank's part, as the conv's.
void pool_backward(const Layer& l, const std::vector<kernels::PoolTaps>& taps, const Tensor& x,
                   const Tensor& gy, const Tensor& gx);

}  // namespace dtensor::halo::chain
