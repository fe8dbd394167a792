// Reading parts of saved shards: only the checksum blocks that overlap the
// part asked for are read (one pread per run of consecutive blocks), and
// each is verified before any of its bytes is used.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "checkpoint/box.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/durable_file.h"

namespace dtensor::checkpoint {

class ShardReader {
 public:
  ShardReader(std::string dir, const CheckpointIndex& index);

  /// Copies `region` (global coordinates, inside the shard) of shard `s` of
  /// tensor `e` into `dst`, the row-major layout of `dst_box`.
  /// CheckpointCorrupt naming the tensor and the file when the file is
  /// missing, shorter than the index says, or a block's checksum differs.
  void read_region(const CheckpointEntry& e, const CheckpointShard& s, const Box& region,
                   const Box& dst_box, void* dst);
  /// Bytes read from files so far.
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  const FileReader& open(const CheckpointEntry& e, const std::string& file);

  std::string dir_;
  const CheckpointIndex& index_;
  std::map<std::string, std::unique_ptr<FileReader>> files_;
  std::int64_t bytes_read_ = 0;
};

}  // namespace dtensor::checkpoint
