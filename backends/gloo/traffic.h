// What this rank puts on (and takes off) the wire under each Gloo algorithm
// the process group calls. Gloo keeps no counters, so these mirror the loops
// of the Gloo 0.5 sources (allreduce.cc ring, allgatherv.cc, alltoallv.cc,
// broadcast.cc, barrier.cc) exactly; the tests check the totals against
// closed-form oracles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtensor::gloo_backend {

struct Traffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t messages_sent = 0;
};

/// gloo::allreduce with the ring algorithm (reduce-scatter then allgather in segments).
Traffic ring_allreduce_traffic(std::size_t total_bytes, std::size_t element_size,
                               std::size_t max_segment_bytes, int size, int rank);
/// gloo::allgatherv: a ring that forwards every block but the receiver's successor's.
Traffic allgatherv_traffic(const std::vector<std::size_t>& block_bytes, int rank);
/// gloo::alltoallv: one message to every other rank (zero-length ones included).
Traffic alltoallv_traffic(const std::vector<std::size_t>& send_bytes,
                          const std::vector<std::size_t>& recv_bytes, int rank);
/// gloo::broadcast: a binomial tree rooted at `root`.
Traffic broadcast_traffic(std::size_t nbytes, int size, int rank, int root);
/// gloo::barrier: a dissemination barrier of empty messages.
Traffic barrier_traffic(int size);

}  // namespace dtensor::gloo_backend
