// The kernel slot of dropout: one rank's part of the tensor, masked by the
// elements' global indices. ops/ finds where the part sits in the whole
// tensor; the kernel draws each element's uniform from (seed, stream, global
// index) with dropout_uniform below, the one definition of the mask.
#pragma once

#include <cstdint>

#include "dtensor/core/errors.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/dropout_hash.h"

namespace dtensor::kernels {

// The mask's hash (dropout_mix, dropout_key, dropout_uniform): dropout_hash.h.

/// output = uniform >= p ? input / (1 - p) : +0 per element, where the
/// element at local multi-index j has the global index of offset + j in
/// global_shape (row-major). p = 1 multiplies everything by 0.
struct DropoutArgs {
  Tensor input;  // this rank's part, contiguous
  Shape global_shape;
  Shape offset;  // where `input` starts in the whole tensor
  std::uint64_t key = 0;
  double p = 0.5;
  Tensor output;  // out, input's shape and dtype
};

inline constexpr KernelSlot<DropoutArgs> kDropout{"dropout.mask"};

/// InvalidArgument naming the slot unless the part fits in the whole tensor
/// where the arguments place it (what every backend's kernel checks first).
inline void check_dropout_part(const DropoutArgs& a) {
  const Shape& local = a.input.shape();
  const auto rank = local.size();
  DTENSOR_CHECK_ARG(a.global_shape.size() == rank && a.offset.size() == rank, kDropout.name,
                    "internal: a {}-d part of a {}-d tensor at a {}-d offset", rank,
                    a.global_shape.size(), a.offset.size());
  for (std::size_t d = 0; d < rank; ++d)
    DTENSOR_CHECK_ARG(a.offset[d] >= 0 && a.offset[d] + local[d] <= a.global_shape[d],
                      kDropout.name, "internal: part {} at {} does not fit in {}", shape_str(local),
                      shape_str(a.offset), shape_str(a.global_shape));
}

}  // namespace dtensor::kernels
