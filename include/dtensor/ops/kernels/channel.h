// The kernel slots of per-channel arithmetic on [N, C, spatial...] tensors:
// adding a bias along dim 1 and summing over every dim but 1 (a bias's
// gradient). The transposed convolution uses them for its bias, which its
// local kernel (a convolution's backward-data) does not take.
//
// Tensors are contiguous, of the slot's dtype and device, [N, C, ...] with
// the elements of each (n, c) contiguous.
#pragma once

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// y[:, c, ...] += bias[c], in place; bias [C] of y's dtype.
struct ChannelBiasArgs {
  Tensor y;  // in and out
  Tensor bias;
};
/// sums[c] = the sum of x[:, c, ...]: [C] f64 CPU whatever the dtype and
/// device, summed in the data's type in blocks and across blocks in f64.
struct ChannelSumsArgs {
  Tensor x;
  Tensor sums;  // out
};

inline constexpr KernelSlot<ChannelBiasArgs> kChannelBias{"channel.add_bias"};
inline constexpr KernelSlot<ChannelSumsArgs> kChannelSums{"channel.sums"};

}  // namespace dtensor::kernels
