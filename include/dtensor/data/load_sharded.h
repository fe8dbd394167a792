// Loading a dataset array straight into a DTensor: the file is memory-mapped
// and each rank copies only its own box (the chunk rule of dtensor_spec.h),
// so an array larger than one rank's memory loads as long as each shard fits.
// Collective over the mesh: every rank calls it with the same arguments, and
// an error on any rank (a missing file, a bad header, a truncated file,
// placements that do not fit the array) is raised on every rank alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/dtype.h"
#include "dtensor/placement/dtensor.h"
#include "dtensor/placement/placement.h"

namespace dtensor::data {

/// What one rank read from the file (for tests and diagnostics): the bytes
/// copied out of the mapping and the span [first_byte, end_byte) of file
/// offsets they came from (both -1 when nothing was read).
struct LoadStats {
  std::int64_t bytes_read = 0;
  std::int64_t first_byte = -1;
  std::int64_t end_byte = -1;
};

struct LoadOptions {
  /// The local tensor's dtype; by default the file's (f2 -> F16, f4 -> F32,
  /// f8 -> F64), and F64 for integer arrays (exact up to 2^53). I64 keeps an
  /// integer array's values exactly ('<i8' as stored, '<i4' widened); a
  /// float array asked for as I64 is refused (InvalidArgument naming `path`).
  std::optional<DType> dtype;
  /// Filled with this rank's reads when set.
  LoadStats* stats = nullptr;
};

/// The NumPy .npy array at `path` (format versions 1, 2 and 3; little-endian
/// '<f2', '<f4', '<f8', '<i4', '<i8'; C order) as a DTensor on `mesh` with
/// `placements` (Shard and Replicate; a Partial is refused: a file holds
/// values, not pending sums). InvalidArgument naming `path` for a file that
/// cannot be opened or read (not .npy, Fortran order, another dtype, fewer or
/// more data bytes than the shape needs) and naming `placements` when they do
/// not fit the array.
DTensor load_npy_sharded(const std::string& path, const DeviceMesh& mesh,
                         const Placements& placements, const LoadOptions& options = {});

/// The same for the tensor `tensor_name` of the safetensors file at `path`
/// (F32, F64, BF16, F16). CheckpointCorrupt naming `path` for a malformed
/// file (checkpoint/safetensors.h's rules), InvalidArgument for a missing
/// file or tensor and for bad placements.
DTensor load_safetensors_sharded(const std::string& path, const std::string& tensor_name,
                                 const DeviceMesh& mesh, const Placements& placements,
                                 const LoadOptions& options = {});

}  // namespace dtensor::data
