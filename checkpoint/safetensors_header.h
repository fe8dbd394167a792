// The header of an existing safetensors file (safetensors_format.h), read
// and checked without touching the data: where each tensor's bytes lie. Both
// read_safetensors (the whole file) and the data layer's sharded loader
// (one box of one tensor) start from it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "checkpoint/durable_file.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"

namespace dtensor::checkpoint {

struct SafetensorsEntry {
  DType dtype = DType::F32;
  Shape shape;
  /// Absolute byte offset of the tensor's first byte in the file.
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

/// Every tensor of the file (the "__metadata__" entry skipped), by name.
/// CheckpointCorrupt naming `path` (and the tensor at fault) when the file is
/// not well formed: truncated, a header that is not JSON, data offsets outside
/// the file or not matching the shape; InvalidArgument for a dtype libdtensor
/// does not have.
std::map<std::string, SafetensorsEntry> read_safetensors_header(const FileReader& file,
                                                                const std::string& path);

}  // namespace dtensor::checkpoint
