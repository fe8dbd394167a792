// Element types and devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dtensor/core/float16_bits.h"

namespace dtensor {

/// The floating element types, and I64: 64-bit signed integers (class
/// indices, as cross_entropy's target). I64 tensors are created, copied,
/// compared, converted, redistributed (Shard <-> Replicate), gathered and
/// read from / written to .npy files, but have no arithmetic: an operator or
/// a reduction that computes on elements refuses them (see visit_dtype).
enum class DType : std::uint8_t { F32, F64, BF16, F16, I64 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "f64", "bf16", "f16", "i64"
/// Parses "f32" / "float32", "f64" / "float64", "bf16" / "bfloat16",
/// "f16" / "float16" / "half", "i64" / "int64".
DType parse_dtype(std::string_view name);
/// Whether `t` is one of the floating dtypes (every dtype but I64).
constexpr bool is_floating(DType t) {
  return t != DType::I64;
}
/// Throws InvalidArgument naming `what` (the parameter or operation) unless
/// `t` is floating: "<what>: i64 tensors hold integers; ... needs f32, f64,
/// bf16 or f16".
void require_floating(DType t, std::string_view what);

/// bfloat16: the top 16 bits of an IEEE float. Conversion rounds to nearest even.
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
      bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<std::uint16_t>(u >> 16);
  }
  explicit operator float() const {
    std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

/// IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits). float -> half
/// rounds to nearest even, overflows to Inf past 65504, keeps subnormals and
/// turns a NaN into a quiet NaN; half -> float is exact (float16_bits.h).
struct Float16 {
  std::uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    bits = detail::f32_bits_to_f16_bits(u);
  }
  explicit operator float() const {
    const std::uint32_t u = detail::f16_bits_to_f32_bits(bits);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

/// The 16-bit float types: stored as bits, computed in float (they have no
/// arithmetic of their own), so element-wise code widens, computes, rounds once.
template <typename T>
inline constexpr bool is_half_float_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

/// Maps a C++ element type to its DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<Float16> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::I64;
};

namespace detail {
/// visit_dtype's refusal of I64 (InvalidArgument, component "core").
[[noreturn]] void refuse_integer_dtype(DType t);
}  // namespace detail

/// Calls f(T{}) with T the C++ type of `t`; the one switch over dtypes that
/// element-wise (floating) code needs. I64 is refused with InvalidArgument,
/// so no floating kernel is instantiated for integers.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      return f(float{});
    case DType::F64:
      return f(double{});
    case DType::BF16:
      return f(BFloat16{});
    case DType::F16:
      return f(Float16{});
    case DType::I64:
      detail::refuse_integer_dtype(t);
  }
  return f(float{});
}

/// The same over every dtype, I64 (std::int64_t) included: for code that
/// moves, converts or compares elements (copies, fills, item()).
template <typename F>
decltype(auto) visit_any_dtype(DType t, F&& f) {
  if (t == DType::I64) return f(std::int64_t{});
  return visit_dtype(t, std::forward<F>(f));
}

enum class DeviceType : std::uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

std::string_view device_type_name(DeviceType t);

}  // namespace dtensor
