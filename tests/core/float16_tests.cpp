// dtensor::Float16 (IEEE binary16) against bit patterns worked out by hand from
// the format (1 sign, 5 exponent bits biased by 15, 10 mantissa bits) and
// confirmed with numpy's float16 — an independent implementation, so a wrong
// rounding or exponent bias in float16_bits.h fails here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "dtensor/core/dtype.h"
#include "dtensor/core/tensor.h"

namespace {

using dtensor::Float16;

std::uint16_t bits_of(float f) {
  return Float16(f).bits;
}
float value_of(std::uint16_t bits) {
  Float16 h;
  h.bits = bits;
  return static_cast<float>(h);
}

}  // namespace

TEST_CASE("f16 conversion: normal values, the largest finite and overflow to Inf", "[dtype][f16]") {
  CHECK(bits_of(1.0f) == 0x3C00);
  CHECK(bits_of(-2.0f) == 0xC000);
  CHECK(bits_of(0.5f) == 0x3800);
  CHECK(bits_of(65504.0f) == 0x7BFF);   // largest finite half
  CHECK(bits_of(65519.0f) == 0x7BFF);   // below the tie: rounds down
  CHECK(bits_of(65520.0f) == 0x7C00);   // the tie goes to even, i.e. Inf
  CHECK(bits_of(-70000.0f) == 0xFC00);  // overflow keeps the sign
  CHECK(bits_of(1e30f) == 0x7C00);
  CHECK(bits_of(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(bits_of(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(bits_of(0.0f) == 0x0000);
  CHECK(bits_of(-0.0f) == 0x8000);
  CHECK(bits_of(0.1f) == 0x2E66);  // 0.0999755859375, the nearest half
}

TEST_CASE("f16 conversion: ties round to even", "[dtype][f16]") {
  // Spacing of halves in [1, 2) is 2^-10.
  CHECK(bits_of(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie: to even 1.0
  CHECK(bits_of(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie: to even 1 + 2^-9
  CHECK(bits_of(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);  // above
  CHECK(bits_of(2049.0f) == 0x6800);  // 2048 + 1: tie between 2048 and 2050, to even 2048
  CHECK(bits_of(2051.0f) == 0x6802);  // tie between 2050 and 2052, to even 2052
}

TEST_CASE("f16 conversion: subnormals and the rounding to zero", "[dtype][f16]") {
  CHECK(bits_of(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(bits_of(std::ldexp(3.0f, -24)) == 0x0003);
  CHECK(bits_of(std::ldexp(1.0f, -25)) == 0x0000);  // half of it: tie, to even 0
  CHECK(bits_of(std::ldexp(1.5f, -25)) == 0x0001);  // above the tie
  CHECK(bits_of(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units: tie, to even 2
  CHECK(bits_of(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(bits_of(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(bits_of(std::ldexp(1023.0f, -24)) == 0x03FF);  // largest subnormal
  // Rounding up out of the subnormals lands on the smallest normal.
  CHECK(bits_of(std::ldexp(1023.75f, -24)) == 0x0400);
}

TEST_CASE("f16 conversion: NaN stays a quiet NaN, half to float is exact", "[dtype][f16]") {
  const std::uint16_t n = bits_of(std::numeric_limits<float>::quiet_NaN());
  CHECK((n & 0x7C00) == 0x7C00);
  CHECK((n & 0x03FF) != 0);
  CHECK((n & 0x0200) != 0);
  // A signalling NaN whose payload lies only in the dropped bits must not become Inf.
  const std::uint32_t snan_bits = 0x7F800001u;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  CHECK(std::isnan(value_of(bits_of(snan))));
  CHECK(value_of(0x3C00) == 1.0f);
  CHECK(value_of(0x7BFF) == 65504.0f);
  CHECK(value_of(0x0001) == std::ldexp(1.0f, -24));
  CHECK(value_of(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(value_of(0x8400) == -std::ldexp(1.0f, -14));
  CHECK(std::isinf(value_of(0xFC00)));
  CHECK(value_of(0xFC00) < 0);
  CHECK(std::isnan(value_of(0x7E00)));
  // Every finite half survives half -> float -> half unchanged.
  int mismatches = 0;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) continue;  // NaNs
    if (bits_of(value_of(h)) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("f16 dtype: name, parsing, size and tensor conversion", "[dtype][f16]") {
  using dtensor::DType;
  CHECK(dtensor::dtype_name(DType::F16) == "f16");
  CHECK(dtensor::dtype_size(DType::F16) == 2);
  for (const char* s : {"f16", "float16", "half"})
    CHECK(dtensor::parse_dtype(s) == DType::F16);
  CHECK_THROWS_WITH(dtensor::parse_dtype("f8"), Catch::Contains("f16"));
  CHECK(dtensor::dtype_of<Float16>::value == DType::F16);
  dtensor::Tensor t = dtensor::Tensor::full({3}, 65520.0, DType::F32);
  t.narrow(0, 1, 1).fill_(1.0 + 1.0 / 2048);
  t.narrow(0, 2, 1).fill_(std::ldexp(1.0, -24));
  const dtensor::Tensor h = t.to(DType::F16);
  CHECK(std::isinf(h.item({0})));
  CHECK(h.item({1}) == 1.0);
  CHECK(h.item({2}) == std::ldexp(1.0, -24));
  // Tensor arithmetic on f16 computes in f32 and rounds once.
  dtensor::Tensor a = dtensor::Tensor::full({2}, 1.0, DType::F16);
  a.add_(dtensor::Tensor::full({2}, 1.0 / 1024, DType::F16));
  CHECK(a.item({0}) == 1.0 + 1.0 / 1024);
}
