// Reading parts of saved shards: only the checksum blocks that overlap the
// part asked for are read (one pread per run of consecutive blocks), and
// each is verified before the load returns. A part that is one contiguous
// run in both layouts (whole rows of a row-sharded tensor, a whole shard) is
// read straight into place, with only the partial blocks at its two ends
// read aside to complete their checksums; any other part is read into
// buffers and copied run by run.
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
  /// Opens the files of every shard of `e`, each checked against the size
  /// the index gives (the same CheckpointCorrupt as read_region): a buffer
  /// sized from the index is then one that the files can fill (the index's
  /// shards lie inside their files and share no bytes).
  void open_files(const CheckpointEntry& e);
  /// Bytes read from files so far (what the tests and benchmarks look at).
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  struct Job;
  const FileReader& open(const CheckpointEntry& e, const std::string& file);
  void read_in_place(const Job& job, std::int64_t src_byte, std::int64_t bytes, char* dst);
  void read_via_buffers(const Job& job, const Box& region, const Box& dst_box, char* dst);

  std::string dir_;
  const CheckpointIndex& index_;
  std::map<std::string, std::unique_ptr<FileReader>> files_;
  std::int64_t bytes_read_ = 0;
};

}  // namespace dtensor::checkpoint
