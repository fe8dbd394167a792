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

void ShardReader::open_files(const CheckpointEntry& e) {
  for (const auto& s : e.shards)
    open(e, s.file);
}

// One shard being read: what the helpers below share.
struct ShardReader::Job {
  const CheckpointEntry& e;
  const CheckpointShard& s;
  const FileReader& file;
  std::string path;
  std::int64_t elem;
  std::int64_t block;
  Box src_box;

  /// Reads shard bytes [begin, begin + bytes) into dst; a short read is truncation.
  void read(std::int64_t begin, std::int64_t bytes, char* dst, std::int64_t& counter) const {
    const std::int64_t got = file.read_at(s.byte_offset + begin, dst, bytes);
    counter += got;
    if (got != bytes)
      corrupt(e, path,
              fmt::format("truncated: bytes [{}, {}) of the file are missing",
                          s.byte_offset + begin + got, s.byte_offset + begin + bytes));
  }

  /// Verifies blocks [first, last] from pieces of bytes that together cover
  /// them (each piece: its first shard byte, its data, its length; in order).
  struct Piece {
    std::int64_t begin;
    const char* data;
    std::int64_t bytes;
  };
  void verify(std::int64_t first, std::int64_t last, const std::vector<Piece>& pieces) const {
    for (std::int64_t k = first; k <= last; ++k) {
      const std::int64_t lo = k * block, hi = std::min(lo + block, s.byte_length);
      std::uint32_t crc = crc32_of(nullptr, 0);
      for (const auto& p : pieces) {
        const std::int64_t a = std::max(lo, p.begin), b = std::min(hi, p.begin + p.bytes);
        if (a < b) crc = crc32_update(crc, p.data + (a - p.begin), b - a);
      }
      if (crc != s.crc32[k])
        corrupt(e, path,
                fmt::format("checksum mismatch in bytes [{}, {}) of the file (block {} of the "
                            "shard at {})",
                            s.byte_offset + lo, s.byte_offset + hi, k, shape_str(s.offsets)));
    }
  }
};

void ShardReader::read_region(const CheckpointEntry& e, const CheckpointShard& s, const Box& region,
                              const Box& dst_box, void* dst) {
  const Job job{e,
                s,
                open(e, s.file),
                (std::filesystem::path(dir_) / s.file).string(),
                static_cast<std::int64_t>(dtype_size(e.dtype)),
                e.block_bytes,
                Box{s.offsets, s.extents}};
  std::int64_t runs = 0, src = 0, at = 0, n = 0;
  for_each_run(region, job.src_box, dst_box,
               [&](std::int64_t s0, std::int64_t d0, std::int64_t n0) {
                 if (runs++ == 0) src = s0, at = d0, n = n0;
               });
  auto* out = static_cast<char*>(dst);
  if (runs == 1)
    read_in_place(job, src * job.elem, n * job.elem, out + at * job.elem);
  else
    read_via_buffers(job, region, dst_box, out);
}

void ShardReader::read_in_place(const Job& job, std::int64_t a, std::int64_t bytes, char* dst) {
  const std::int64_t b = a + bytes;
  const std::int64_t first = a / job.block, last = (b - 1) / job.block;
  const std::int64_t lo = first * job.block,
                     hi = std::min((last + 1) * job.block, job.s.byte_length);
  // The ends of the first and last blocks that lie outside the run, read aside.
  std::vector<char> head(static_cast<std::size_t>(a - lo)), tail(static_cast<std::size_t>(hi - b));
  job.read(lo, a - lo, head.data(), bytes_read_);
  job.read(a, bytes, dst, bytes_read_);
  job.read(b, hi - b, tail.data(), bytes_read_);
  job.verify(first, last, {{lo, head.data(), a - lo}, {a, dst, bytes}, {b, tail.data(), hi - b}});
}

void ShardReader::read_via_buffers(const Job& job, const Box& region, const Box& dst_box,
                                   char* out) {
  const std::int64_t elem = job.elem, block = job.block;
  const auto nblocks = static_cast<std::int64_t>(job.s.crc32.size());

  // Pass 1: the blocks that the region's runs touch.
  std::vector<char> needed(static_cast<std::size_t>(nblocks), 0);
  for_each_run(region, job.src_box, dst_box, [&](std::int64_t src, std::int64_t, std::int64_t n) {
    for (std::int64_t b = src * elem / block; b <= ((src + n) * elem - 1) / block; ++b)
      needed[b] = 1;
  });

  // Each stretch of consecutive needed blocks: one pread into a buffer, every block verified.
  struct Segment {
    std::int64_t first_byte;        // within the shard
    std::unique_ptr<char[]> bytes;  // not zeroed: the read fills it
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
    const std::int64_t end = std::min(b * block, job.s.byte_length);
    Segment seg{begin, std::unique_ptr<char[]>(new char[static_cast<std::size_t>(end - begin)])};
    job.read(begin, end - begin, seg.bytes.get(), bytes_read_);
    job.verify(first, b - 1, {{begin, seg.bytes.get(), end - begin}});
    segments.push_back(std::move(seg));
  }

  // Pass 2: copy the runs out of the verified bytes (a run never spans two
  // segments: its blocks are all needed, hence consecutive in one segment).
  for_each_run(region, job.src_box, dst_box, [&](std::int64_t src, std::int64_t d, std::int64_t n) {
    const Segment& seg = segments[segment_of[src * elem / block]];
    std::memcpy(out + d * elem, seg.bytes.get() + (src * elem - seg.first_byte),
                static_cast<std::size_t>(n * elem));
  });
}

}  // namespace dtensor::checkpoint
