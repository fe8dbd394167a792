// Checksums per fixed-size block (CRC-32, zlib's): a reader that needs only
// part of a shard reads the blocks that overlap that part and verifies each,
// instead of reading the whole shard to check one sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtensor::checkpoint {

/// The block size new checkpoints use (1 MiB: small enough that a reader
/// wastes little, large enough that the checksum list stays short). The
/// index records it, so a reader never assumes it.
inline constexpr std::int64_t kChecksumBlockBytes = std::int64_t{1} << 20;

/// The CRC-32 of each `block_bytes` block of [data, data + bytes), the last
/// one shorter; none for zero bytes.
std::vector<std::uint32_t> block_crc32(const void* data, std::int64_t bytes,
                                       std::int64_t block_bytes);
std::uint32_t crc32_of(const void* data, std::int64_t bytes);
/// The CRC-32 of the bytes behind `crc` followed by [data, data + bytes):
/// a block's sum computed from pieces that lie in different buffers.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::int64_t bytes);
/// Number of blocks of `bytes` bytes.
std::int64_t block_count(std::int64_t bytes, std::int64_t block_bytes);

}  // namespace dtensor::checkpoint
