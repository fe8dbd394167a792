// The trainer's data: NumPy .npy arrays (little-endian f4/f8, C order). Its
// initial weights, one safetensors file, are read by the library
// (dtensor/checkpoint/safetensors.h).
#pragma once

#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::train {

/// InvalidArgument naming the file on anything it cannot read.
Tensor read_npy(const std::string& path);

}  // namespace dtensor::train
