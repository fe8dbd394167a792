// The kernel slot of dropout: one rank's part of the tensor, masked by the
// elements' global indices. ops/ finds where the part sits in the whole
// tensor; the kernel draws each element's uniform from (seed, stream, global
// index) with dropout_uniform below, the one definition of the mask.
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// splitmix64's finaliser: a bijection of 64-bit words that mixes every bit.
constexpr std::uint64_t dropout_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// The key of one (seed, stream): every element of that call hashes with it.
constexpr std::uint64_t dropout_key(std::uint64_t seed, std::uint64_t stream) {
  return dropout_mix(seed ^ dropout_mix(stream + 0x9E3779B97F4A7C15ull));
}
/// Element `index`'s uniform in [0, 1): the top 53 bits of the splitmix64
/// output at position index + 1 of the key's stream.
constexpr double dropout_uniform(std::uint64_t key, std::uint64_t index) {
  return static_cast<double>(dropout_mix(key + (index + 1) * 0x9E3779B97F4A7C15ull) >> 11) *
         0x1.0p-53;
}

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

}  // namespace dtensor::kernels
