#include "data/npy_header.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "dtensor/core/errors.h"

namespace dtensor::data {
namespace {

// The value of `key` in the header dict, from its first non-blank character.
// Parsed by hand, not with std::regex: libstdc++'s matcher recurses once per
// character, and a v2 header may be 4 GiB.
std::string_view value_of(std::string_view header, std::string_view key, const std::string& path) {
  const std::string k = "'" + std::string(key) + "':";
  const std::size_t at = header.find(k);
  check_arg(at != std::string_view::npos, "data", "{}: no {} in the .npy header", path, key);
  // NumPy keeps the last of two equal keys; a header with two is ambiguous.
  check_arg(header.find(k, at + k.size()) == std::string_view::npos, "data",
            "{}: the .npy header has more than one {}", path, key);
  const std::string_view rest = header.substr(at + k.size());
  const std::size_t start = rest.find_first_not_of(" \t");
  check_arg(start != std::string_view::npos, "data", "{}: no value for {} in the .npy header", path,
            key);
  return rest.substr(start);
}

NpyElement element_of(std::string_view v, const std::string& path) {
  const std::size_t end = v.size() > 1 && v[0] == '\'' ? v.find('\'', 1) : std::string_view::npos;
  check_arg(end != std::string_view::npos, "data", "{}: descr is not a quoted string", path);
  const std::string_view descr = v.substr(1, end - 1);
  std::string_view kind = descr;
  // '<' little-endian, '|' byte-order-free; '=' native, which is little here.
  if (!kind.empty() && (kind[0] == '<' || kind[0] == '=' || kind[0] == '|')) kind.remove_prefix(1);
  if (kind == "f2") return NpyElement::F16;
  if (kind == "f4") return NpyElement::F32;
  if (kind == "f8") return NpyElement::F64;
  if (kind == "i4") return NpyElement::I32;
  if (kind == "i8") return NpyElement::I64;
  throw InvalidArgument(
      "data", fmt::format("{}: dtype '{}' is not one of <f2, <f4, <f8, <i4, <i8", path, descr));
}

// "(2, 3, 4)" (also "(5,)" and "()") as a Shape.
Shape tuple_of_extents(std::string_view v, const std::string& path) {
  const std::size_t end = v.empty() || v[0] != '(' ? std::string_view::npos : v.find(')');
  check_arg(end != std::string_view::npos, "data", "{}: shape is not a tuple", path);
  const std::string_view inner = v.substr(1, end - 1);
  Shape shape;
  std::size_t from = 0;
  while (from <= inner.size()) {
    const std::size_t comma = std::min(inner.find(',', from), inner.size());
    std::string_view item = inner.substr(from, comma - from);
    const std::size_t a = item.find_first_not_of(" \t"), z = item.find_last_not_of(" \t");
    item = a == std::string_view::npos ? std::string_view() : item.substr(a, z - a + 1);
    if (!item.empty()) {
      std::int64_t e = -1;
      const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), e);
      check_arg(ec == std::errc() && ptr == item.data() + item.size() && e >= 0, "data",
                "{}: shape ({}) is not a tuple of non-negative integers", path, inner);
      shape.push_back(e);
    }
    from = comma + 1;
  }
  return shape;
}

}  // namespace

std::size_t npy_element_size(NpyElement e) {
  switch (e) {
    case NpyElement::F16:
      return 2;
    case NpyElement::F32:
    case NpyElement::I32:
      return 4;
    case NpyElement::F64:
    case NpyElement::I64:
      return 8;
  }
  return 4;
}

std::string_view npy_descr(NpyElement e) {
  switch (e) {
    case NpyElement::F16:
      return "<f2";
    case NpyElement::F32:
      return "<f4";
    case NpyElement::F64:
      return "<f8";
    case NpyElement::I32:
      return "<i4";
    case NpyElement::I64:
      return "<i8";
  }
  return "?";
}

DType npy_carrier(NpyElement e) {
  switch (e) {
    case NpyElement::F16:
      return DType::F16;
    case NpyElement::F32:
    case NpyElement::I32:
      return DType::F32;
    case NpyElement::F64:
    case NpyElement::I64:
      return DType::F64;
  }
  return DType::F32;
}

DType npy_values(NpyElement e) {
  return e == NpyElement::I32 || e == NpyElement::I64 ? DType::F64 : npy_carrier(e);
}

Tensor decode_npy(const Tensor& raw, NpyElement e) {
  if (e != NpyElement::I32 && e != NpyElement::I64) return raw;
  Tensor out = Tensor::empty(raw.shape(), DType::F64);
  auto* dst = out.data<double>();
  const auto n = static_cast<std::size_t>(raw.numel());
  const auto* src = static_cast<const char*>(raw.data_ptr());
  for (std::size_t i = 0; i < n; ++i) {
    if (e == NpyElement::I32) {
      std::int32_t v = 0;
      std::memcpy(&v, src + 4 * i, 4);
      dst[i] = static_cast<double>(v);
    } else {
      std::int64_t v = 0;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<double>(v);
    }
  }
  return out;
}

DType npy_carrier_for(NpyElement e, DType dtype, const std::string& path) {
  if (dtype != DType::I64) return npy_carrier(e);
  DTENSOR_CHECK_ARG(e == NpyElement::I32 || e == NpyElement::I64, "data",
                    "{}: dtype i64 loads integer arrays ('<i4', '<i8'), the file holds '{}'", path,
                    npy_descr(e));
  return e == NpyElement::I64 ? DType::I64 : npy_carrier(e);
}

Tensor decode_npy_for(const Tensor& raw, NpyElement e, DType dtype) {
  if (dtype != DType::I64) return decode_npy(raw, e);
  if (e == NpyElement::I64) return raw;  // carried in I64: the file's integers
  Tensor out = Tensor::empty(raw.shape(), DType::I64);
  auto* dst = out.data<std::int64_t>();
  const auto* src = static_cast<const char*>(raw.data_ptr());
  for (std::size_t i = 0; i < static_cast<std::size_t>(raw.numel()); ++i) {
    std::int32_t v = 0;
    std::memcpy(&v, src + 4 * i, 4);
    dst[i] = v;
  }
  return out;
}

NpyHeader parse_npy_header(std::string_view file, const std::string& path) {
  check_arg(file.size() >= 10 && file.substr(0, 6) == "\x93NUMPY", "data", "{}: not a .npy file",
            path);
  const auto byte = [&](std::size_t i) -> std::uint64_t {
    return static_cast<unsigned char>(file[i]);
  };
  const std::uint64_t major = byte(6);
  DTENSOR_CHECK_ARG(major >= 1 && major <= 3, "data",
                    "{}: .npy format version {}.{} is not 1, 2 or 3", path, major, byte(7));
  std::uint64_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = byte(8) | (byte(9) << 8);
    at = 10;
  } else {
    check_arg(file.size() >= 12, "data", "{}: truncated .npy header", path);
    header_len = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
    at = 12;
  }
  DTENSOR_CHECK_ARG(header_len <= file.size() - at, "data",
                    "{}: truncated .npy header ({} bytes promised, {} in the file)", path,
                    header_len, file.size() - at);
  const std::string_view h = file.substr(at, header_len);
  NpyHeader out;
  out.element = element_of(value_of(h, "descr", path), path);
  const std::string_view order = value_of(h, "fortran_order", path);
  check_arg(order.substr(0, 4) != "True", "data",
            "{}: Fortran order is not supported (save a C-order array: np.ascontiguousarray)",
            path);
  check_arg(order.substr(0, 5) == "False", "data", "{}: fortran_order is not True or False", path);
  out.shape = tuple_of_extents(value_of(h, "shape", path), path);
  out.data_offset = at + header_len;
  return out;
}

void check_npy_size(const NpyHeader& h, std::uint64_t file_size, const std::string& path) {
  std::uint64_t want = npy_element_size(h.element);
  for (const std::int64_t e : h.shape)
    DTENSOR_CHECK_ARG(!__builtin_mul_overflow(want, static_cast<std::uint64_t>(e), &want), "data",
                      "{}: shape {} has more bytes than 64 bits count", path, shape_str(h.shape));
  const std::uint64_t have = file_size - h.data_offset;
  DTENSOR_CHECK_ARG(have == want, "data", "{}: {} data bytes for shape {} of {} ({} expected{})",
                    path, have, shape_str(h.shape), npy_descr(h.element), want,
                    have < want ? ": the file is truncated" : "");
}

}  // namespace dtensor::data
