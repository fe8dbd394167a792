// The allreduce by recursive halving and doubling (Rabenseifner's), as a pure
// plan: which elements each rank sends to whom, step by step, from the
// group's size, the rank and the element count alone.
//
// Gloo's ring takes 2(P-1) message latencies one after another; this takes
// 2 log2 P for a power of two, with the same bytes (each rank sends
// 2(P-1)/P of the buffer). Among P' = the largest power of two <= P ranks:
//   - halving (a reduce-scatter): log2 P' steps; in each, a rank and its
//     partner (rank XOR d, d = P'/2 .. 1) each keep half of their range and
//     send the other half, combining what they receive into what they keep;
//     at the end virtual rank v holds block v of the reduction;
//   - doubling (an allgather): log2 P' steps (d = 1 .. P'/2), each rank
//     sending what it holds and receiving its partner's.
// With P not a power of two, the first 2 (P - P') ranks pair up first: the
// even one of each pair sends its whole buffer to the odd one, which takes
// part for both, and gets the result back at the end (two more latencies and
// one more buffer each way).
//
// Each element of the result is combined on exactly one rank and copied to
// the others, so every rank gets the same bits. tests/comm fuzzes the plans
// of every rank together against the ranks' contributions.
#pragma once

#include <cstdint>
#include <vector>

namespace dtensor::detail {

/// One step of a rank's plan: the messages it exchanges with `peer`, then
/// what it does with what it received. Empty ranges are not sent.
struct HalvingDoublingStep {
  int peer = -1;
  std::int64_t send_lo = 0, send_hi = 0;  // elements [lo, hi) of the buffer to the peer
  std::int64_t recv_lo = 0, recv_hi = 0;  // elements [lo, hi) from it
  /// Combined with this rank's own elements (the halving and the fold), or
  /// written over them (the doubling and the result sent back).
  bool combine = false;
  /// Combined as (peer's, own) rather than (own, peer's): the lower rank's
  /// value first, as the other algorithms combine in rank order.
  bool peer_first = false;
};

/// The steps of `rank` among `size` ranks for a buffer of `n` elements, in
/// the order they run.
std::vector<HalvingDoublingStep> plan_halving_doubling(int rank, int size, std::int64_t n);

/// The largest power of two that is at most `size` (>= 1).
int power_of_two_at_most(int size);

/// Message latencies one after another (the longest path), and the bytes on
/// that path as a multiple of the buffer's, among `size` ranks.
int halving_doubling_rounds(int size);
double halving_doubling_share(int size);

}  // namespace dtensor::detail
