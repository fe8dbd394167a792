#include "tools/dtensor-train-unet/tensor_files.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "dtensor/core/errors.h"

namespace dtensor::train {
namespace {

std::string slurp(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  check_arg(static_cast<bool>(in), what, "{}: cannot open", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Tensor from_bytes(const char* data, std::size_t n, const Shape& shape, DType dtype,
                  const std::string& path) {
  Tensor t = Tensor::empty(shape, dtype);
  check_arg(n == t.nbytes(), "data", "{}: {} bytes for shape {} ({} expected)", path, n,
            shape_str(shape), t.nbytes());
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
  const std::string h = b.substr(at, header_len);
  std::smatch m;
  check_arg(std::regex_search(h, m, std::regex("'descr':\\s*'([<|=]?)([fi])(\\d)'")), "data",
            "{}: no descr in the header", path);
  check_arg(m[2] == "f" && (m[3] == "4" || m[3] == "8"), "data", "{}: dtype {}{} is not f4 or f8",
            path, m[2].str(), m[3].str());
  const DType dtype = m[3] == "4" ? DType::F32 : DType::F64;
  check_arg(h.find("'fortran_order': False") != std::string::npos, "data",
            "{}: Fortran order is not supported", path);
  check_arg(std::regex_search(h, m, std::regex("'shape':\\s*\\(([^)]*)\\)")), "data",
            "{}: no shape in the header", path);
  Shape shape;
  std::stringstream dims(m[1].str());
  std::string d;
  while (std::getline(dims, d, ','))
    if (d.find_first_not_of(' ') != std::string::npos) shape.push_back(std::stoll(d));
  return from_bytes(b.data() + at + header_len, b.size() - at - header_len, shape, dtype, path);
}

}  // namespace dtensor::train
