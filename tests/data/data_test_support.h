// Helpers of the data tests: a .npy writer of its own (so the loader is
// checked against the format, not against itself), arrays whose element i
// (row-major) is i, and the expected local part of such an array.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"
#include "tests/checkpoint/checkpoint_test_support.h"

namespace dtensor::testing {

struct NpyWriteOptions {
  int version = 1;
  bool fortran_order = false;
  /// Bytes cut from the end of the data (a truncated file).
  std::int64_t cut = 0;
};

/// Writes the array of `shape` whose element i is i, as `descr` ("<f4", "<i8", ...).
inline void write_index_npy(const std::string& path, const Shape& shape, const std::string& descr,
                            NpyWriteOptions o = {}) {
  std::string dims;
  for (const auto e : shape)
    dims += std::to_string(e) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string dict = "{'descr': '" + descr +
                     "', 'fortran_order': " + (o.fortran_order ? "True" : "False") +
                     ", 'shape': (" + dims + "), }";
  const std::size_t prefix = o.version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0)
    dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(o.version);
  out += '\0';
  const auto n = static_cast<std::uint32_t>(dict.size());
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (o.version != 1) {
    out += static_cast<char>((n >> 16) & 0xff);
    out += static_cast<char>((n >> 24) & 0xff);
  }
  out += dict;
  const std::int64_t numel = shape_numel(shape);
  for (std::int64_t i = 0; i < numel; ++i) {
    char bytes[8];
    std::size_t size = 0;
    if (descr == "<f4") {
      const auto v = static_cast<float>(i);
      std::memcpy(bytes, &v, size = 4);
    } else if (descr == "<f8") {
      const auto v = static_cast<double>(i);
      std::memcpy(bytes, &v, size = 8);
    } else if (descr == "<i4") {
      const auto v = static_cast<std::int32_t>(i);
      std::memcpy(bytes, &v, size = 4);
    } else if (descr == "<i8") {
      const auto v = static_cast<std::int64_t>(i);
      std::memcpy(bytes, &v, size = 8);
    } else if (descr == "<f2") {
      const Float16 v(static_cast<float>(i));
      std::memcpy(bytes, &v.bits, size = 2);
    } else {
      FAIL("write_index_npy: no writer for " << descr);
    }
    out.append(bytes, size);
  }
  out.resize(out.size() - static_cast<std::size_t>(o.cut));
  std::ofstream(path, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

/// This rank's part, as F64, of the array whose element i is i, laid out by `spec`.
inline Tensor expected_index_local(const DTensorSpec& spec) {
  const Shape local = spec.local_shape(), offset = spec.global_offset();
  const Shape strides = contiguous_strides(spec.shape());
  Tensor t = Tensor::empty(local, DType::F64);
  auto* out = t.data<double>();
  const std::int64_t n = shape_numel(local);
  for (std::int64_t l = 0; l < n; ++l) {
    std::int64_t rest = l, global = 0;
    for (std::int64_t d = static_cast<std::int64_t>(local.size()) - 1; d >= 0; --d) {
      const std::int64_t at = rest % local[d];
      rest /= local[d];
      global += (offset[d] + at) * strides[d];
    }
    out[l] = static_cast<double>(global);
  }
  return t;
}

/// The loaded local tensor equals expected_index_local, element for element.
inline void require_index_local(const DTensor& loaded) {
  INFO(loaded.spec().str() << " on rank " << get_rank());
  const Tensor want = expected_index_local(loaded.spec());
  const Tensor got = loaded.to_local().to(Device::cpu()).contiguous().to(DType::F64);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) == 0);
}

}  // namespace dtensor::testing
