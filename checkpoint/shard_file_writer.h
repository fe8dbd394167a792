// Writing one rank's shards as one safetensors file, durably, and what the
// index needs to know about it (byte ranges and block checksums), in a form
// that travels to the rank that writes the index.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/core/tensor.h"

namespace dtensor::checkpoint {

struct ShardToWrite {
  std::size_t tensor = 0;  // index in the saved list
  std::string key;         // its name inside the safetensors file
  Box box;
  Tensor data;  // contiguous, on the CPU, of shape box.extents
};

struct WrittenShard {
  std::size_t tensor = 0;
  CheckpointShard shard;
};

struct WrittenFile {
  std::string file;  // name in the checkpoint directory
  std::int64_t bytes = 0;
  std::vector<WrittenShard> shards;
};

/// Writes `shards` to DIR/FILE (through a temporary name, fsync'ed, renamed).
WrittenFile write_shard_file(const std::string& dir, const std::string& file,
                             const std::vector<ShardToWrite>& shards, std::int64_t block_bytes);

std::string written_file_to_json(const WrittenFile& f);
WrittenFile written_file_from_json(const std::string& text);

/// The key of a shard inside its file: "NAME@o0,o1,..." (unique per file).
std::string shard_key(const std::string& name, const Shape& offsets);

}  // namespace dtensor::checkpoint
