// Point-to-point messages between the members of a group that share a host,
// through rings in shared memory (shm_ring.h) instead of Gloo's TCP pairs.
//
// Why: over loopback TCP every message crosses the kernel twice and is
// finished by Gloo's event-loop thread, which shares the rank's core and runs
// only when the rank blocks (event_loop_device.h); at P = 2 a U-Net step
// spent 2-4 ms a rank on that (docs/performance-p2-step.md). Here the sender
// copies into the ring and the receiver copies out, each on its own thread,
// and a receiver that has nothing to read spins briefly, then sleeps on a
// futex in the shared page that the writer rings.
//
// Semantics are Gloo's: messages between two ranks match by slot, in the
// order posted; a send completes once its bytes are in the ring, a receive
// once its bytes are in place. A message that arrives before its receive is
// posted waits in the ring, or in memory when a later one is needed first.
//
// Which pairs use it is agreed through the store when the group connects
// (ShmChannel::connect): both ranks on one kernel (boot id), in one pid, IPC
// and network namespace under one uid (ranks in two network namespaces are
// two hosts to the user, and to the tests that cut the link between them),
// and the segment the lower rank created, mapped by the higher one with the
// nonce the lower one published. Anything else keeps the pair on TCP.
//
// Failures: a group that fails marks its side of every segment closed, so a
// peer waiting on it hears at once (as closing the TCP connections does); a
// peer whose process has gone is found by its pid within 100 ms of waiting;
// a wait past its timeout throws TimeoutError; close() (the group failed or
// was aborted) ends this rank's waits under way.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/gloo/call_name.h"
#include "dtensor/core/tensor.h"

namespace dtensor {
class Work;
}

namespace dtensor::gloo_backend {

class StoreAdapter;
class GlooProcessGroup;

class ShmChannel : public std::enable_shared_from_this<ShmChannel> {
 public:
  /// Every member's host, through the store (every member calls it): the
  /// same text for members that may share memory, "off" for one that has it
  /// off (`enabled` false: DTENSOR_GLOO_SHM=off) or cannot tell its host.
  static std::vector<std::string> hosts(StoreAdapter& store, int rank, int size, bool enabled);
  /// Every member calls it, after the TCP pairs connected, with hosts()'s
  /// answer. Null when no other member shares this host (or none could map
  /// a segment); the pairs it does not reach stay on TCP.
  static std::shared_ptr<ShmChannel> connect(StoreAdapter& store, int rank,
                                             const std::vector<std::string>& hosts);
  /// Whether hosts()'s answer puts every member on one host with shared
  /// memory on: the same on every member.
  static bool one_host(const std::vector<std::string>& hosts);
  ~ShmChannel();

  /// Each direction's ring, for a rank with `local_peers` other members on
  /// its host: 1 MiB up to 16 of them, then halved until the rank's rings
  /// (two per peer) fit 32 MiB, but never under 64 KiB. Every member of a
  /// host computes the same from the same count.
  static std::uint64_t ring_bytes(std::size_t local_peers);

  bool reaches(int peer) const;
  /// Posts a send or a receive of `t`'s bytes on `slot`; the handle's wait
  /// reports failures through `group` (fail() on a broken peer).
  std::shared_ptr<Work> post(bool is_send, const Tensor& t, int peer, std::uint64_t slot,
                             const P2PName& what, std::shared_ptr<GlooProcessGroup> group);
  /// The group failed: peers waiting on this rank hear of it, and this
  /// rank's waits under way end, naming the group's failure.
  void close();

  struct Impl;

 private:
  explicit ShmChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtensor::gloo_backend
