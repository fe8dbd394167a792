// An upsample's parameters as the window engine reads them: per spatial dim
// the output size and the scale factor PyTorch's kernels index by, and the
// window (WindowDim::Kind::Resample) that follows. The upsample operator and
// the halo chain's upsample layer both read them from here.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/op_schema.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/window.h"

namespace dtensor::window {

/// upsample()'s parameters for an input of shape `x`: per spatial dim the
/// output size and the scale factor (0 where sized by `size`).
/// InvalidArgument naming the parameter, as upsample() raises it.
struct ExpandedUpsample {
  IntList output_size;
  std::vector<double> scales;
};
ExpandedUpsample expand_upsample(const Shape& x, const UpsampleParams& p);

/// The window of spatial dim `d`.
WindowDim resample_dim(const ExpandedUpsample& e, std::size_t d, bool linear, bool align_corners);

}  // namespace dtensor::window
