#include "checkpoint/block_checksum.h"

#include <zlib.h>

#include <algorithm>

namespace dtensor::checkpoint {

std::uint32_t crc32_of(const void* data, std::int64_t bytes) {
  return crc32_update(static_cast<std::uint32_t>(crc32(0L, Z_NULL, 0)), data, bytes);
}

std::uint32_t crc32_update(std::uint32_t crc_in, const void* data, std::int64_t bytes) {
  // zlib takes uInt lengths: feed it in pieces that fit.
  uLong crc = crc_in;
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const auto n = static_cast<uInt>(std::min<std::int64_t>(bytes, 1 << 30));
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

std::int64_t block_count(std::int64_t bytes, std::int64_t block_bytes) {
  return (bytes + block_bytes - 1) / block_bytes;
}

std::vector<std::uint32_t> block_crc32(const void* data, std::int64_t bytes,
                                       std::int64_t block_bytes) {
  std::vector<std::uint32_t> out;
  out.reserve(static_cast<std::size_t>(block_count(bytes, block_bytes)));
  const auto* p = static_cast<const char*>(data);
  for (std::int64_t at = 0; at < bytes; at += block_bytes)
    out.push_back(crc32_of(p + at, std::min(block_bytes, bytes - at)));
  return out;
}

}  // namespace dtensor::checkpoint
