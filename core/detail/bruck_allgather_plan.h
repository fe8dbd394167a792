// The allgather by Bruck's algorithm, as a pure plan: ceil(log2 P) message
// latencies and as many messages a rank, for any P, where a ring takes P-1 of
// each and a direct round one latency but P-1 messages.
//
// A rank works in a buffer that holds the blocks in rotated order, its own
// first: position j holds rank (rank + j) mod P's block. In round k (d =
// 2^k) it sends its first min(d, P - d) blocks to rank - d and receives as
// many from rank + d, which are the blocks that follow the ones it holds, so
// after the last round it holds all P; a copy out of rotated order ends the
// call. Counts may differ (allgatherv) and be zero: each message is one
// contiguous range of the buffer, empty ones not sent.
#pragma once

#include <cstdint>
#include <vector>

namespace dtensor::detail {

struct BruckRound {
  int send_to = -1, recv_from = -1;
  std::int64_t send_lo = 0, send_hi = 0;  // elements of the rotated buffer
  std::int64_t recv_lo = 0, recv_hi = 0;
};

struct BruckAllgatherPlan {
  /// Where rank q's block starts in this rank's rotated buffer (P + 1
  /// entries: the last is the total).
  std::vector<std::int64_t> rotated_offset;
  std::vector<BruckRound> rounds;
};

/// The plan of `rank` among `counts.size()` ranks, rank q contributing
/// counts[q] elements.
BruckAllgatherPlan plan_bruck_allgather(int rank, const std::vector<std::int64_t>& counts);

/// ceil(log2 P): the plan's rounds, one latency each.
int bruck_rounds(int size);

}  // namespace dtensor::detail
