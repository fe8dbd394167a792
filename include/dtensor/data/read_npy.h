// One whole .npy array on one process, without communication: for tools that
// read their data before a process group exists. Sharded loading, where each
// rank reads only its part, is load_npy_sharded (load_sharded.h).
#pragma once

#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::data {

/// The array at `path` as a CPU tensor: the dtypes, versions and rules of
/// load_npy_sharded (integers become F64). InvalidArgument naming `path` for
/// anything it cannot read, before allocating more than the file holds.
Tensor read_npy(const std::string& path);
/// The same converted to `dtype` (LoadOptions::dtype's rules: I64 for
/// integer arrays only).
Tensor read_npy(const std::string& path, DType dtype);

}  // namespace dtensor::data
