// The checkpoint's index (index.json): decoded once into a typed struct,
// validated as it is read, so that loading plans with trusted numbers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtensor/checkpoint/checkpoint.h"

namespace dtensor::checkpoint {

/// The index's name in the checkpoint directory: its rename is the commit point.
inline constexpr const char* kIndexFileName = "index.json";
inline constexpr const char* kFormatName = "dtensor-checkpoint";
inline constexpr int kFormatVersion = 1;

struct CheckpointIndex {
  /// The save that wrote it; every shard file name carries it.
  std::string generation;
  std::int64_t block_bytes = 0;
  /// Each shard file's size in bytes (a shorter file was truncated).
  std::map<std::string, std::int64_t> file_bytes;
  std::vector<CheckpointEntry> tensors;  // in the order they were saved
};

std::string index_to_json(const CheckpointIndex& index);
/// Decodes and checks an index's text; CheckpointCorrupt naming `path` when malformed.
CheckpointIndex parse_index(const std::string& text, const std::string& path);
/// Reads DIR/index.json; InvalidArgument naming `dir` when there is none.
CheckpointIndex read_index(const std::string& dir);

/// "shards-<generation>-rank<r>.safetensors": unique per save, so a save never
/// overwrites a file the committed index refers to.
std::string shard_file_name(const std::string& generation, int world_rank);
/// Whether `name` is a file a save writes (a shard file or a temporary one),
/// i.e. one the cleanup after a commit may remove when no index refers to it.
bool is_save_output(const std::string& name);

}  // namespace dtensor::checkpoint
