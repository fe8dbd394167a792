#include "tools/dtensor-train-unet/tensor_files.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string_view>

#include "dtensor/core/errors.h"

namespace dtensor::train {
namespace {

std::string slurp(const std::string& path, const char* what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  check_arg(std::filesystem::exists(status), what, "{}: cannot open", path);
  // A directory's or a FIFO's "size" is no length to read (and a FIFO blocks).
  check_arg(std::filesystem::is_regular_file(status), what, "{}: not a regular file", path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  check_arg(static_cast<bool>(in), what, "{}: cannot open", path);
  const std::streamoff size = in.tellg();
  check_arg(size >= 0, what, "{}: cannot tell its size", path);
  std::string s;
  try {
    s.resize(static_cast<std::size_t>(size));
  } catch (const std::bad_alloc&) {
    // The user's file, too large for this process: say which.
    throw InvalidArgument(what, fmt::format("{}: its {} bytes do not fit in memory", path, size));
  }
  in.seekg(0);
  check_arg(static_cast<bool>(in.read(s.data(), size)), what, "{}: cannot be read whole", path);
  return s;
}

// The value of `key` in a .npy header (a Python dict literal), from its
// first non-blank character. Parsed by hand, not with std::regex: libstdc++'s
// matcher recurses once per character, and a header may be 4 GiB.
std::string_view value_of(std::string_view header, std::string_view key, const std::string& path) {
  const std::string k = "'" + std::string(key) + "':";
  const std::size_t at = header.find(k);
  check_arg(at != std::string_view::npos, "data", "{}: no {} in the header", path, key);
  // NumPy's own reader keeps the last of two equal keys, this one the first:
  // a header with two is ambiguous, not a choice to make silently.
  check_arg(header.find(k, at + k.size()) == std::string_view::npos, "data",
            "{}: the header has more than one {}", path, key);
  const std::string_view rest = header.substr(at + k.size());
  const std::size_t start = rest.find_first_not_of(" \t");
  check_arg(start != std::string_view::npos, "data", "{}: no value for {} in the header", path,
            key);
  return rest.substr(start);
}

// The text between the quotes that `v` starts with.
std::string_view quoted(std::string_view v, const std::string& path) {
  const std::size_t end = v.size() > 1 && v[0] == '\'' ? v.find('\'', 1) : std::string_view::npos;
  check_arg(end != std::string_view::npos, "data", "{}: descr is not a quoted string", path);
  return v.substr(1, end - 1);
}

// "(2, 3, 4)" (a Python tuple of extents, "(5,)" or "()" too) as a Shape.
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

Tensor from_bytes(const char* data, std::size_t n, const Shape& shape, DType dtype,
                  const std::string& path) {
  // The size the header claims is checked against the bytes the file holds
  // before anything is allocated: a header may promise exabytes.
  std::uint64_t want = dtype_size(dtype);
  for (const std::int64_t e : shape)
    check_arg(!__builtin_mul_overflow(want, static_cast<std::uint64_t>(e), &want), "data",
              "{}: shape {} has more bytes than 64 bits count ({} bytes of data follow)", path,
              shape_str(shape), n);
  check_arg(n == want, "data", "{}: {} bytes for shape {} ({} expected)", path, n, shape_str(shape),
            want);
  Tensor t = Tensor::empty(shape, dtype);
  if (n) std::memcpy(t.data_ptr(), data, n);
  return t;
}

}  // namespace

Tensor read_npy(const std::string& path) {
  const std::string b = slurp(path, "data");
  check_arg(b.size() >= 10 && b.compare(0, 6, "\x93NUMPY") == 0, "data", "{}: not a .npy file",
            path);
  const int major = static_cast<unsigned char>(b[6]);
  std::size_t header_len, at;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    at = 10;
  } else {
    check_arg(b.size() >= 12, "data", "{}: truncated header", path);
    std::uint32_t n;
    std::memcpy(&n, b.data() + 8, 4);
    header_len = n;
    at = 12;
  }
  check_arg(at + header_len <= b.size(), "data", "{}: truncated header", path);
  const std::string_view h(b.data() + at, header_len);
  const std::string_view descr = quoted(value_of(h, "descr", path), path);
  // Little-endian (or byte-order-free) f4 / f8: "<f8", "=f4", "|f8", "f4".
  std::string_view kind = descr;
  if (!kind.empty() && (kind[0] == '<' || kind[0] == '=' || kind[0] == '|')) kind.remove_prefix(1);
  check_arg(kind == "f4" || kind == "f8", "data", "{}: dtype {} is not f4 or f8", path, descr);
  const DType dtype = kind == "f4" ? DType::F32 : DType::F64;
  check_arg(value_of(h, "fortran_order", path).substr(0, 5) == "False", "data",
            "{}: Fortran order is not supported", path);
  const Shape shape = tuple_of_extents(value_of(h, "shape", path), path);
  return from_bytes(b.data() + at + header_len, b.size() - at - header_len, shape, dtype, path);
}

}  // namespace dtensor::train
