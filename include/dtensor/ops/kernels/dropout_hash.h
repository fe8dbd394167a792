// The one definition of dropout's mask: each element's uniform drawn from
// (seed, stream, global index) by integer hashing, so every rank, thread
// count and backend (the CPU kernel, backends/cpu/dropout_kernels.cpp, and the
// CUDA kernel, backends/cuda/dropout.cu) draws the same mask. Plain C++17
// with host/device qualifiers, so nvcc compiles it as it is.
#pragma once

#include <cstdint>

#include "dtensor/core/float16_bits.h"  // DTENSOR_HOST_DEVICE

namespace dtensor::kernels {

/// splitmix64's finaliser: a bijection of 64-bit words that mixes every bit.
DTENSOR_HOST_DEVICE constexpr std::uint64_t dropout_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// The key of one (seed, stream): every element of that call hashes with it.
DTENSOR_HOST_DEVICE constexpr std::uint64_t dropout_key(std::uint64_t seed, std::uint64_t stream) {
  return dropout_mix(seed ^ dropout_mix(stream + 0x9E3779B97F4A7C15ull));
}
/// Element `index`'s uniform in [0, 1): the top 53 bits of the splitmix64
/// output at position index + 1 of the key's stream.
DTENSOR_HOST_DEVICE constexpr double dropout_uniform(std::uint64_t key, std::uint64_t index) {
  return static_cast<double>(dropout_mix(key + (index + 1) * 0x9E3779B97F4A7C15ull) >> 11) *
         0x1.0p-53;
}

}  // namespace dtensor::kernels
