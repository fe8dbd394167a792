// Which collectives of a CPU group run as one round of direct messages.
//
// A small collective costs its message latencies, not its bytes. Gloo's ring
// allreduce takes 2(P-1) latencies one after another (a reduce-scatter, then
// an allgather) and its allgather P-1, and each runs on the group's
// collective thread, a hand-off each way. Sending every contribution to
// every peer at once takes one latency and runs on the caller's thread (at
// P = 2 over a simulated 500 us link, a 4-byte allreduce took 1.14 ms on
// the ring and 0.66 ms direct; a 384-byte allgather 0.77 ms on the ring and
// 0.70 ms direct). The price is bytes: each rank
// receives P-1 contributions whole, so only collectives whose rank receives
// at most kDirectCollectiveBytes run this way (a group norm's statistics, a
// loss, the agreement checks, a small model's gradients at a few ranks).
//
// The Gloo group (backends/gloo) chooses by these rules and the simulated
// link (simulated_link_process_group.h) models its cost by them. Every rank
// must choose alike, so the rules read only what every rank knows: the
// group's size and the collective's sizes, which all ranks pass alike.
#pragma once

#include <cstdint>

namespace dtensor::detail {

/// The most bytes one rank receives in a direct collective.
inline constexpr std::uint64_t kDirectCollectiveBytes = std::uint64_t{256} << 10;

/// An allreduce of `bytes` per rank: each rank receives the P-1 others'.
inline bool allreduce_runs_direct(std::uint64_t bytes, int size) {
  return size > 1 && bytes * static_cast<std::uint64_t>(size - 1) <= kDirectCollectiveBytes;
}

/// An allgather into `out_bytes`: each rank receives all blocks but its own.
inline bool allgather_runs_direct(std::uint64_t out_bytes, int size) {
  return size > 1 && out_bytes <= kDirectCollectiveBytes;
}

}  // namespace dtensor::detail
