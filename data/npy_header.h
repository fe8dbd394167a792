// The header of a NumPy .npy file: "\x93NUMPY", a version (1.0: 2-byte
// header length; 2.0 and 3.0: 4-byte), then a Python dict literal with
// 'descr', 'fortran_order' and 'shape'; the C-order data follows it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/tensor.h"

namespace dtensor::data {

/// The element types a .npy file may hold here.
enum class NpyElement : std::uint8_t { F16, F32, F64, I32, I64 };
std::size_t npy_element_size(NpyElement e);
/// "<f2", "<f4", "<f8", "<i4", "<i8".
std::string_view npy_descr(NpyElement e);
/// The dtype whose elements have the stored bytes: integers are carried in
/// the float dtype of their width until decode_npy turns them into values.
DType npy_carrier(NpyElement e);
/// The dtype of the values: the file's for floats, F64 for integers (exact
/// up to 2^53; libdtensor has no integer dtype).
DType npy_values(NpyElement e);
/// `raw` (npy_carrier's dtype, holding the file's bytes) as npy_values' dtype.
Tensor decode_npy(const Tensor& raw, NpyElement e);

/// The same for a load that asks for `dtype`: an integer array asked for as
/// I64 stays integer ('<i8' carried in I64 as its bytes are, '<i4' widened),
/// everything else is npy_carrier's and decode_npy's (then converted).
/// InvalidArgument naming `path` and dtype for a float array asked for as
/// I64 (a float has no one integer to become).
DType npy_carrier_for(NpyElement e, DType dtype, const std::string& path);
Tensor decode_npy_for(const Tensor& raw, NpyElement e, DType dtype);

struct NpyHeader {
  NpyElement element = NpyElement::F32;
  Shape shape;
  /// Byte offset of the data (the header's total length).
  std::uint64_t data_offset = 0;
};

/// Parses the header at the start of `file` (the first bytes of the file, at
/// least as many as the header holds). InvalidArgument naming `path` for
/// anything else: not .npy, an unknown version, a truncated header, Fortran
/// order, a big-endian or unsupported dtype, a malformed dict.
NpyHeader parse_npy_header(std::string_view file, const std::string& path);

/// InvalidArgument naming `path` unless a file of `file_size` bytes holds
/// exactly the array's data after the header (checked in 64 bits before
/// anything is allocated: a header may promise exabytes).
void check_npy_size(const NpyHeader& h, std::uint64_t file_size, const std::string& path);

}  // namespace dtensor::data
