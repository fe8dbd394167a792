// Padding a rank fills from the rows it holds, and the gradient folded back.
//
// A convolution inside a fused chain (halo_chain.h) that pads by reflection
// or replication computes, at the input's edges, on rows the rank has just
// computed itself: there is no exchange to materialise its padding (as
// WindowExchange does for a convolution run alone), so the rank copies the
// padding from its own rows into a padded tensor, and the backward adds each
// padding cell's gradient onto the cell it was copied from. The plan checks
// that the rows read are held (halo_chain_plan.h).
#pragma once

#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/window.h"

namespace dtensor::detail {

/// The part of `padded` ([N, C, spatial...]) that is not padding: a view.
/// `pads`: (left, right) per spatial dim.
Tensor unpadded_view(const Tensor& padded, const ConvParams::Padding& pads);

/// Fills the padding of `padded` from its unpadded view, as `boundary` says
/// (Reflect: x[-i] = x[i], Replicate: x[-i] = x[0], mirrored on the right),
/// dim after dim, so a corner is filled as PyTorch's padding fills it. Any
/// other boundary is not filled from held rows: InvalidArgument.
void fill_padding(const Tensor& padded, Boundary boundary, const ConvParams::Padding& pads);

/// The backward of fill_padding, in place on the gradient over the padded
/// tensor: each padding cell's gradient is added onto the cell it was
/// copied from (dims in reverse order); unpadded_view(grad) is then the
/// gradient of the unpadded tensor.
void fold_padding(const Tensor& grad, Boundary boundary, const ConvParams::Padding& pads);

}  // namespace dtensor::detail
