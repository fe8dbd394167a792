#include "checkpoint/shard_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "checkpoint/block_checksum.h"

namespace dtensor::checkpoint {

namespace {

[[noreturn]] void corrupt(const CheckpointEntry& e, const std::string& path,
                          const std::string& why) {
  throw CheckpointCorrupt("checkpoint",
                          fmt::format("tensor '{}', file '{}': {}", e.name, path, why));
}

}  // namespace

ShardReader::ShardReader(std::string dir, const CheckpointIndex& index)
    : dir_(std::move(dir)), index_(index) {}

const FileReader& ShardReader::open(const CheckpointEntry& e, const std::string& file) {
  auto& slot = files_[file];
  if (slot) return *slot;
  const std::string path = (std::filesystem::path(dir_) / file).string();
  try {
    slot = std::make_unique<FileReader>(path);
  } catch (const Error& ex) {
    corrupt(e, path, ex.what());
  }
  const std::int64_t expected = index_.file_bytes.at(file);
  if (slot->size() < expected)
    corrupt(e, path, fmt::format("truncated: {} bytes, the index says {}", slot->size(), expected));
  return *slot;
}

void ShardReader::read_region(const CheckpointEntry& e, const CheckpointShard& s, const Box& region,
                              const Box& dst_box, void* dst) {
  const FileReader& file = open(e, s.file);
  const std::string path = (std::filesystem::path(dir_) / s.file).string();
  const auto elem = static_cast<std::int64_t>(dtype_size(e.dtype));
  const std::int64_t block = e.block_bytes;
  const Box src_box{s.offsets, s.extents};
  const auto nblocks = static_cast<std::int64_t>(s.crc32.size());

  // Pass 1: the blocks that the region's runs touch.
  std::vector<char> needed(static_cast<std::size_t>(nblocks), 0);
  for_each_run(region, src_box, dst_box, [&](std::int64_t src, std::int64_t, std::int64_t n) {
    for (std::int64_t b = src * elem / block; b <= ((src + n) * elem - 1) / block; ++b)
      needed[b] = 1;
  });

  // Read each stretch of consecutive needed blocks with one pread; verify every block.
  struct Segment {
    std::int64_t first_byte;  // within the shard
    std::vector<char> bytes;
  };
  std::vector<Segment> segments;
  std::vector<std::int64_t> segment_of(static_cast<std::size_t>(nblocks), -1);
  for (std::int64_t b = 0; b < nblocks;) {
    if (!needed[b]) {
      ++b;
      continue;
    }
    const std::int64_t first = b;
    while (b < nblocks && needed[b])
      segment_of[b++] = static_cast<std::int64_t>(segments.size());
    const std::int64_t begin = first * block;
    const std::int64_t end = std::min(b * block, s.byte_length);
    Segment seg{begin, std::vector<char>(static_cast<std::size_t>(end - begin))};
    const std::int64_t got = file.read_at(s.byte_offset + begin, seg.bytes.data(), end - begin);
    bytes_read_ += got;
    if (got != end - begin)
      corrupt(e, path,
              fmt::format("truncated: bytes [{}, {}) of the file are missing",
                          s.byte_offset + begin + got, s.byte_offset + end));
    for (std::int64_t k = first; k < b; ++k) {
      const std::int64_t at = k * block - begin;
      const std::int64_t len = std::min(block, s.byte_length - k * block);
      if (crc32_of(seg.bytes.data() + at, len) != s.crc32[k])
        corrupt(e, path,
                fmt::format("checksum mismatch in bytes [{}, {}) of the file (block {} of the "
                            "shard at {})",
                            s.byte_offset + k * block, s.byte_offset + k * block + len, k,
                            shape_str(s.offsets)));
    }
    segments.push_back(std::move(seg));
  }

  // Pass 2: copy the runs out of the verified bytes (a run never spans two
  // segments: its blocks are all needed, hence consecutive in one segment).
  auto* out = static_cast<char*>(dst);
  for_each_run(region, src_box, dst_box, [&](std::int64_t src, std::int64_t d, std::int64_t n) {
    const Segment& seg = segments[segment_of[src * elem / block]];
    std::memcpy(out + d * elem, seg.bytes.data() + (src * elem - seg.first_byte),
                static_cast<std::size_t>(n * elem));
  });
}

}  // namespace dtensor::checkpoint
