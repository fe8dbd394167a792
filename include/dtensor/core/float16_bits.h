// IEEE 754 binary16 <-> binary32 conversion on bit patterns.
//
// Integer arithmetic only, so the result does not depend on the FPU's rounding
// mode or on -ffast-math, and C++17 with host/device qualifiers under nvcc: the
// CUDA kernels (backends/cuda/*.cu) include this same code, so host and device
// conversions agree bit for bit. dtensor::Float16 (dtype.h) wraps it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DTENSOR_HOST_DEVICE __host__ __device__
#else
#define DTENSOR_HOST_DEVICE
#endif

namespace dtensor::detail {

/// float bits -> half bits: round to nearest even; past 65504 overflows to Inf
/// (65520 is the tie, which goes to Inf: 65504's mantissa is odd); results below
/// 2^-14 become subnormals (2^-25 is the tie to zero); a NaN becomes a quiet NaN
/// that keeps the top payload bits.
DTENSOR_HOST_DEVICE constexpr std::uint16_t f32_bits_to_f16_bits(std::uint32_t u) {
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x47800000u)  // >= 65536 and Inf; 65520..65536 carries into Inf below
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {  // below 2^-14: a subnormal (or zero), in units of 2^-24
    const std::uint32_t shift = 126u - (a >> 23);  // value = m * 2^-24 / 2^shift
    if (shift > 24u) return sign;                  // below 2^-25: zero
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to
  // nearest even; a mantissa carry moves into the exponent (up to Inf).
  const std::uint32_t r = a - (112u << 23) + 0xfffu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

/// half bits -> float bits, exact (every half is a float).
DTENSOR_HOST_DEVICE constexpr std::uint32_t f16_bits_to_f32_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return sign | 0x7f800000u | (m << 13);  // Inf / NaN
  if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0) return sign;
  e = 113;  // subnormal: normalise, the float has the exponent range for it
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --e;
  }
  return sign | (e << 23) | ((m & 0x3ffu) << 13);
}

}  // namespace dtensor::detail
