#include "backends/gloo/traffic.h"

#include <sys/types.h>
#include <algorithm>

namespace dtensor::gloo_backend {
namespace {

std::size_t round_up(std::size_t x, std::size_t m) {
  return (x + m - 1) / m * m;
}

std::size_t log2_ceil(std::size_t n) {
  std::size_t d = 0;
  while ((std::size_t{1} << d) < n)
    ++d;
  return d;
}

}  // namespace

Traffic ring_allreduce_traffic(std::size_t total_bytes, std::size_t element_size,
                               std::size_t max_segment_bytes, int size, int rank) {
  Traffic t;
  if (size <= 1 || total_bytes == 0) return t;
  // Same arithmetic as gloo/allreduce.cc ring(): segments per rank, segment
  // size rounded to elements, offsets wrapping around the whole buffer.
  const std::size_t P = static_cast<std::size_t>(size);
  const std::size_t r = static_cast<std::size_t>(rank);
  const std::size_t max_seg =
      element_size * std::max<std::size_t>(1, max_segment_bytes / element_size);
  const std::size_t num_segments =
      round_up(std::max((total_bytes + max_seg - 1) / max_seg, P * 2), P);
  const std::size_t per_rank = num_segments / P;
  const std::size_t seg_bytes =
      round_up((total_bytes + num_segments - 1) / num_segments, element_size);
  const std::size_t span = num_segments * seg_bytes;
  auto length = [&](std::size_t offset) {
    return std::min<ssize_t>(static_cast<ssize_t>(seg_bytes),
                             static_cast<ssize_t>(total_bytes) - static_cast<ssize_t>(offset));
  };
  auto account = [&](std::size_t send_base, std::size_t recv_base) {
    for (std::size_t i = 0; i < num_segments - per_rank; ++i) {
      const ssize_t s = length(((send_base * per_rank + i) * seg_bytes) % span);
      const ssize_t q = length(((recv_base * per_rank + i) * seg_bytes) % span);
      if (s > 0) {
        t.bytes_sent += static_cast<std::uint64_t>(s);
        t.messages_sent += 1;
      }
      if (q > 0) t.bytes_received += static_cast<std::uint64_t>(q);
    }
  };
  account(r + 1, r + 2);  // reduce-scatter
  account(r, r + 1);      // allgather
  return t;
}

Traffic allgatherv_traffic(const std::vector<std::size_t>& block_bytes, int rank) {
  Traffic t;
  const std::size_t P = block_bytes.size();
  if (P <= 1) return t;
  const std::size_t base = P + static_cast<std::size_t>(rank);
  for (std::size_t i = 0; i + 1 < P; ++i) {
    t.bytes_sent += block_bytes[(base - i) % P];
    t.bytes_received += block_bytes[(base - i - 1) % P];
    t.messages_sent += 1;
  }
  return t;
}

Traffic alltoallv_traffic(const std::vector<std::size_t>& send_bytes,
                          const std::vector<std::size_t>& recv_bytes, int rank) {
  Traffic t;
  for (std::size_t q = 0; q < send_bytes.size(); ++q) {
    if (static_cast<int>(q) == rank) continue;
    t.bytes_sent += send_bytes[q];
    t.bytes_received += recv_bytes[q];
    t.messages_sent += 1;
  }
  return t;
}

Traffic broadcast_traffic(std::size_t nbytes, int size, int rank, int root) {
  Traffic t;
  const std::size_t vsize = static_cast<std::size_t>(size);
  const std::size_t vrank =
      (static_cast<std::size_t>(rank) + vsize - static_cast<std::size_t>(root)) % vsize;
  const std::size_t dim = log2_ceil(vsize);
  std::size_t mask = (std::size_t{1} << dim) - 1;
  for (std::size_t i = 0; i < dim; ++i) {
    mask ^= (std::size_t{1} << i);
    if ((vrank & mask) != 0) continue;
    const std::size_t vpeer = vrank ^ (std::size_t{1} << i);
    if (vpeer >= vsize) continue;
    if ((vrank & (std::size_t{1} << i)) == 0) {
      t.bytes_sent += nbytes;
      t.messages_sent += 1;
    } else {
      t.bytes_received += nbytes;
    }
  }
  return t;
}

Traffic barrier_traffic(int size) {
  Traffic t;
  for (int d = 1; d < size; d <<= 1)
    t.messages_sent += 1;
  return t;
}

}  // namespace dtensor::gloo_backend
