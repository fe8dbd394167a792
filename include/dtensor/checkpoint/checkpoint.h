// Sharded checkpoints: every rank writes its own shards as safetensors files
// next to one JSON index; loading reads back any part onto any mesh,
// placements and world size. docs/checkpoints.md describes the format, the
// commit protocol that keeps the previous checkpoint intact through a crash,
// and the per-block checksums.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/shape.h"
#include "dtensor/placement/dtensor.h"
#include "dtensor/placement/dtensor_spec.h"

namespace dtensor {

/// A checkpoint file is damaged: a shard file truncated or missing, or its bytes
/// not matching the index's checksums (the message names the tensor and the
/// file), or the index itself malformed (the message names it).
class CheckpointCorrupt : public Error {
 public:
  using Error::Error;
};

using NamedDTensors = std::vector<std::pair<std::string, DTensor>>;

/// Collective over the tensors' meshes (every rank calls with the same names/specs in the same
/// order; the largest mesh must hold every other mesh's ranks). Every rank writes only its own
/// shards, in parallel, no gather; a shard replicated over ranks is written once (by the lowest
/// rank holding it). Partial tensors are reduced first. Atomic: the previous checkpoint in `dir`
/// stays intact and loadable until the new index is renamed into place. A failure on any rank
/// is raised on every rank (the new files are removed, the old checkpoint stays).
void save_checkpoint(const NamedDTensors& tensors, const std::string& dir);

/// What load asks for: a name and the spec (mesh, placements, global shape, dtype) to load onto.
struct CheckpointTarget {
  std::string name{};
  DTensorSpec spec;  // no default: a target needs one
};
/// Targets with the names and specs of `tensors` (load onto the layout they have).
std::vector<CheckpointTarget> checkpoint_targets(const NamedDTensors& tensors);

/// Collective over the targets' meshes. Loads each target onto its spec (any mesh, placements or
/// world size: resharding); each rank reads only the checksum blocks that overlap its part.
/// Partial(sum) targets get the value on index 0 of the mesh dim and zeros elsewhere, other
/// Partial ops the value everywhere (as distribute_tensor). Missing name, shape or dtype
/// mismatch -> InvalidArgument naming the tensor; a corrupt or truncated file ->
/// CheckpointCorrupt naming the tensor and the file, on every rank.
NamedDTensors load_checkpoint(const std::string& dir, const std::vector<CheckpointTarget>& targets);

/// One saved shard: the box [offsets, offsets + extents) of the global tensor, stored row-major
/// at [byte_offset, byte_offset + byte_length) of `file` (a name in the checkpoint directory),
/// with the CRC-32 of each `block_bytes`-sized block of those bytes (the last one shorter).
struct CheckpointShard {
  Shape offsets{};
  Shape extents{};
  std::string file{};
  std::int64_t byte_offset = 0;
  std::int64_t byte_length = 0;
  std::vector<std::uint32_t> crc32{};
};

/// What the index says about one tensor.
struct CheckpointEntry {
  std::string name{};
  Shape shape{};
  DType dtype = DType::F32;
  /// The placements it was saved with, as placements_str writes them ("S(0),R"); a Partial
  /// one was reduced before saving, so its shards hold the reduced value.
  std::string placements{};
  std::vector<std::int64_t> mesh_shape{};
  /// Every shard that holds data (an empty shard has none, so it is not listed).
  std::vector<CheckpointShard> shards{};
  /// The checksum block size of `shards`' crc32 lists.
  std::int64_t block_bytes = 0;
};

/// The index, read on one process (no communication): for dtensor-ckpt and for callers that want
/// to know what a checkpoint holds. InvalidArgument naming `dir` when there is no checkpoint
/// there; CheckpointCorrupt naming the index when it is malformed.
std::vector<CheckpointEntry> read_checkpoint_index(const std::string& dir);

/// Single-process: every tensor whole into one safetensors file (readable by Python's
/// `safetensors`), written atomically. Every shard's checksums are verified.
void consolidate_checkpoint(const std::string& dir, const std::string& out_file);

}  // namespace dtensor
