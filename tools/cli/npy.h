// A minimal .npy writer (format version 1.0, C order, little endian), so that
// dumps can be read by numpy and checked against PyTorch (tools/check_dump.py).
//
// f32, f64 and f16 are written as '<f4' / '<f8' / '<f2'. numpy has no bfloat16, so bf16
// tensors are widened to float32 ('<f4'): exact, since every bf16 value is a
// float32 value; meta.json records that the computation ran in bf16.
#pragma once

#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::cli {

/// The numpy dtype string a tensor of `t` is written as ('<f4', '<f8', '<f2').
std::string npy_descr(DType t);

/// The complete header (magic, version, length, dict, padding) for a tensor of
/// `shape` written as `descr`; its size is a multiple of 64 as numpy writes it.
std::string npy_header(const std::string& descr, const Shape& shape);

/// Writes `t` (any strides; a CPU tensor) to `path`. Throws std::runtime_error
/// naming the path when the file cannot be written.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace dtensor::cli
