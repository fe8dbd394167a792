// The kernel slot of a dimension permutation: the one local data movement the
// view operators need (reshape and narrow are views or Tensor copies).
//
// Tensors are of the slot's dtype and device; the kernel moves elements, so
// it depends on the element size only.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// output[i_0, ..., i_{n-1}] = input[j] with j[order[k]] = i_k: torch.permute
/// made contiguous. input contiguous; output contiguous, of shape
/// input.shape()[order[k]] for k in 0..n-1.
struct PermuteArgs {
  Tensor input;
  Tensor output;  // out
  std::vector<std::int64_t> order;
};

inline constexpr KernelSlot<PermuteArgs> kPermute{"layout.permute"};

}  // namespace dtensor::kernels
