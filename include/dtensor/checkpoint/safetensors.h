// One safetensors file, whole, on one process: the format Hugging Face's
// `safetensors` package and `torch` exchange weights in, and the one
// consolidate_checkpoint writes. For initial weights made elsewhere, and for
// a model's state written or read on one rank; sharded, resharding state goes
// through save_checkpoint / load_checkpoint instead (checkpoint.h).
#pragma once

#include <map>
#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor {

/// Every tensor of the file at `path` as a CPU tensor, by name (the
/// "__metadata__" entry is skipped). Dtypes F32, F64, BF16 and F16.
/// InvalidArgument naming `path` when it cannot be opened or holds another
/// dtype; CheckpointCorrupt naming the file, and the tensor where one is at
/// fault, when it is not a well-formed safetensors file (truncated, a header
/// that is not JSON, data offsets outside the file or not matching the shape).
std::map<std::string, Tensor> read_safetensors(const std::string& path);

/// Writes `tensors` (any device, any strides) into one safetensors file at
/// `path`, in name order, atomically: a crash leaves the previous file or
/// none, never a partial one.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors);

}  // namespace dtensor
