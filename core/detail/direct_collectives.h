// Which algorithm a CPU group's allreduce and allgather run.
//
// A small collective costs its message latencies, not its bytes. Gloo's ring
// allreduce takes 2(P-1) latencies one after another (a reduce-scatter, then
// an allgather) and its allgather P-1, and each runs on the group's
// collective thread, a hand-off each way. Sending every contribution to
// every peer at once ("direct") takes one latency and runs on the caller's
// thread (at P = 2 over a simulated 500 us link, a 4-byte allreduce took
// 1.14 ms on the ring and 0.66 ms direct; a 384-byte allgather 0.77 ms on
// the ring and 0.70 ms direct). The price is bytes and messages: each rank
// receives P-1 contributions whole, so only collectives whose rank receives
// at most kDirectCollectiveBytes run this way (a group norm's statistics, a
// loss, the agreement checks, a small model's gradients at a few ranks), and
// each rank sends P-1 messages, which at hundreds of ranks cost more than
// the latencies they save.
//
// An allreduce too large (or a group too large) for that runs by recursive
// halving and doubling (halving_doubling_plan.h: 2 log2 P latencies, the
// ring's bytes) or on the ring, whichever the link model below prices
// lower: from 4 ranks up the former for every size at a power of two; the
// ring at 2 and 3 ranks and for large buffers where P is not a power of two
// (the pairs that fold first move one buffer more). An allgather likewise
// runs by Bruck's algorithm (bruck_allgather_plan.h: ceil(log2 P) latencies
// and messages, the ring's bytes, and two local copies of the output) or on
// Gloo's ring: Bruck's from 4 ranks up unless the output is large enough for
// its copies to cost more than the latencies they save.
//
// The Gloo group (backends/gloo) chooses by these rules and the simulated
// link (simulated_link_process_group.h) models its cost by them. Every rank
// must choose alike, so the rules read only what every rank knows: the
// group's size and the collective's sizes, which all ranks pass alike.
#pragma once

#include <cstdint>

#include "core/detail/bruck_allgather_plan.h"
#include "core/detail/halving_doubling_plan.h"

namespace dtensor::detail {

/// The most bytes one rank receives in a direct collective.
inline constexpr std::uint64_t kDirectCollectiveBytes = std::uint64_t{256} << 10;

/// The link as the choices below see it, in latencies (alpha): a message
/// costs its sender 0.02 of one, a byte 1 / 64 Ki of one. A message's cost
/// is ~5 us (performance.md) against a latency of 50 us on a LAN and 500 us
/// on the slow links the benchmarks simulate; 0.02 sits between, nearer the
/// slow end, where leaving a direct round too early costs most: one round
/// of P-1 messages stays direct up to a few hundred ranks (a tiny allreduce
/// to 1000, an allgather to 512), a little longer than ideal on a LAN.
inline constexpr double kMessageCostInLatencies = 0.02;
inline constexpr double kBytesPerLatency = 64.0 * 1024;
/// Memory copies move bytes ~8 times faster than the link (a core copies
/// ~10 GB/s through memory, performance.md).
inline constexpr double kCopiedBytesPerLatency = 8 * kBytesPerLatency;

enum class AllreduceAlgorithm { Direct, HalvingDoubling, Ring };

/// The cheapest allreduce of `bytes` per rank among `size` (> 1) ranks by
/// the model above, direct only within kDirectCollectiveBytes; a tie goes to
/// direct, then to the ring.
inline AllreduceAlgorithm allreduce_algorithm(std::uint64_t bytes, int size) {
  const double p = size, b = static_cast<double>(bytes) / kBytesPerLatency;
  const double m = kMessageCostInLatencies;
  const double ring = 2 * (p - 1) * (1 + m) + 2 * (p - 1) / p * b;
  const double halving_doubling =
      halving_doubling_rounds(size) * (1 + m) + halving_doubling_share(size) * b;
  const bool direct_fits = bytes * static_cast<std::uint64_t>(size - 1) <= kDirectCollectiveBytes;
  const double direct = 1 + (p - 1) * m + (p - 1) * b;
  if (direct_fits && direct <= ring && direct <= halving_doubling)
    return AllreduceAlgorithm::Direct;
  return halving_doubling < ring ? AllreduceAlgorithm::HalvingDoubling : AllreduceAlgorithm::Ring;
}

/// An allreduce of `bytes` per rank that runs direct: each rank receives the P-1 others'.
inline bool allreduce_runs_direct(std::uint64_t bytes, int size) {
  return size > 1 && allreduce_algorithm(bytes, size) == AllreduceAlgorithm::Direct;
}

enum class AllgatherAlgorithm { Direct, Bruck, Ring };

/// The cheapest allgather into `out_bytes` among `size` (> 1) ranks by the
/// model above, direct only within kDirectCollectiveBytes; a tie goes to
/// direct, then to the ring. Every algorithm moves the same bytes to a rank
/// (all blocks but its own); Bruck's also copies the output twice.
inline AllgatherAlgorithm allgather_algorithm(std::uint64_t out_bytes, int size) {
  const double p = size, m = kMessageCostInLatencies;
  const double b = static_cast<double>(out_bytes) / kBytesPerLatency * (p - 1) / p;
  const double direct = 1 + (p - 1) * m + b;
  const double bruck = bruck_rounds(size) * (1 + m) + b +
                       2 * static_cast<double>(out_bytes) / kCopiedBytesPerLatency;
  const double ring = (p - 1) * (1 + m) + b;
  if (out_bytes <= kDirectCollectiveBytes && direct <= bruck && direct <= ring)
    return AllgatherAlgorithm::Direct;
  return bruck < ring ? AllgatherAlgorithm::Bruck : AllgatherAlgorithm::Ring;
}

}  // namespace dtensor::detail
