#include "tools/cli/npy.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace dtensor::cli {

// The descr strings say '<' (little endian); the bytes are written as they
// lie in memory.
static_assert(std::endian::native == std::endian::little, "npy writer assumes little endian");

std::string npy_descr(DType t) {
  switch (t) {
    case DType::F64:
      return "<f8";
    case DType::F16:
      return "<f2";  // IEEE binary16, numpy's float16: written as is
    case DType::I64:
      return "<i8";  // numpy's int64: written as is
    case DType::F32:
    case DType::BF16:  // widened by write_npy (see npy.h)
      break;
  }
  return "<f4";
}

std::string npy_header(const std::string& descr, const Shape& shape) {
  std::string dims;
  for (auto d : shape)
    dims += fmt::format("{}, ", d);
  // A 1-tuple needs its trailing comma, "(5,)"; numpy writes "(2, 3)" otherwise.
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // magic (6) + version (2) + length (2) + dict + spaces + '\n', to a multiple of 64.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 0xffff) throw std::runtime_error("npy: header too long for format 1.0");
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

void write_npy(const std::string& path, const Tensor& t) {
  // bf16 widened to f32 (see npy.h); contiguous so the bytes are in C order.
  const Tensor data = (t.dtype() == DType::BF16 ? t.to(DType::F32) : t).contiguous();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("--dump: cannot write {}", path));
  const std::string header = npy_header(npy_descr(data.dtype()), data.shape());
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (data.numel() > 0)
    out.write(static_cast<const char*>(data.data_ptr()),
              static_cast<std::streamsize>(data.nbytes()));
  out.close();
  if (!out) throw std::runtime_error(fmt::format("--dump: failed writing {}", path));
}

}  // namespace dtensor::cli
