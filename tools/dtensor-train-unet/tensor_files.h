// The trainer's inputs: NumPy .npy arrays (little-endian f4/f8, C order) and
// one safetensors file of whole tensors (F32/F64).
#pragma once

#include <map>
#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::train {

/// InvalidArgument naming the file on anything it cannot read.
Tensor read_npy(const std::string& path);
std::map<std::string, Tensor> read_safetensors(const std::string& path);

}  // namespace dtensor::train
