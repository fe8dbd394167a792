// dtensor::ProcessGroup over Gloo's TCP transport (CPU tensors).
//
// One gloo::rendezvous::Context per group; the world and its subgroups share
// one TCP device (one event-loop thread). A group of one rank has no context:
// its operations are local copies, it never talks to itself over TCP.
//
// Arguments are checked, and messages a rank sends to itself delivered, by
// the validating layer every backend's groups are wrapped in
// (core/detail/validating_process_group.h): this class assumes valid calls.
//
// Failure model: Gloo closes every connection of a context when an operation
// times out, and we do the same on any other failure (a peer that died), so
// that the other ranks notice at once instead of waiting out their timeout.
// After a CommError/TimeoutError the group is unusable; every later call
// throws CommError naming the first failure. Collectives run on a thread of
// the group's own (collective_thread.h), so that a failure ends their
// caller's wait even where Gloo would leave it blocked.
//
// Creating the first multi-rank group sets SIGPIPE to "ignore" unless the
// application installed its own handler: Gloo's writes to a dead peer would
// otherwise kill the process instead of raising CommError.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/gloo/buffer_pool.h"
#include "backends/gloo/call_name.h"
#include "backends/gloo/collective_thread.h"
#include "backends/gloo/event_loop_device.h"
#include "backends/gloo/shm_channel.h"
#include "dtensor/core/direct_allreduce.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/process_group.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace dtensor::gloo_backend {

class GlooProcessGroup : public ProcessGroup,
                         public std::enable_shared_from_this<GlooProcessGroup> {
 public:
  /// Connects the world group (every rank calls it). Binds to init.hostname,
  /// else init.iface, else 127.0.0.1.
  static std::shared_ptr<GlooProcessGroup> create_world(const BackendInit& init);

  ~GlooProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }
  /// Gloo's receives name their source and slot (the tag).
  bool matches_by_tag(DeviceType) const override { return true; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) override;
  std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag = 0) override;

  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& t, int root) override;
  void allgather(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts) override;
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts,
                      ReduceOp op = ReduceOp::Sum) override;
  void all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                  const std::vector<std::int64_t>& recv_counts) override;
  void barrier() override;

  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;
  /// fail(reason), and the point-to-point waits under way return at once
  /// (closing the connections alone does not end a send already waiting for
  /// its peer's notification).
  void abort(const std::string& reason) override;
  /// ~5 us when every member shares this host (shared memory; agreed alike
  /// on every rank), else the default (TCP).
  double message_seconds() const override;

  // ---- used by the point-to-point Work handles ----
  /// Throws CommError when an earlier failure broke the group.
  void check_usable(const CallName& op) const;
  /// Records the first failure and closes every connection so peers notice.
  void fail(const std::string& reason);
  /// Registers a wait on `buffer` so that abort() can end it; false (and
  /// nothing registered) when the group already failed.
  bool begin_wait(::gloo::transport::UnboundBuffer* buffer, bool is_send);
  void end_wait(::gloo::transport::UnboundBuffer* buffer);
  /// Where completed transfers return their buffers for reuse.
  BufferPool& buffer_pool() { return pool_; }
  /// Keeps a dropped, never-waited transfer's buffer and memory alive as long
  /// as the connections: Gloo may still read or write them, and a receive
  /// whose buffer vanished would break the connection.
  void park_unfinished(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer, Tensor tensor);

 private:
  GlooProcessGroup(int rank, int size, std::vector<int> global_ranks, std::shared_ptr<Store> store,
                   std::string prefix, std::chrono::milliseconds timeout,
                   std::shared_ptr<::gloo::transport::Device> device);
  /// Rendezvous through the store and connect every pair (size() > 1 only).
  void connect();
  /// Runs a blocking Gloo call on the collective thread: typed errors naming
  /// `op`, the group broken on failure. `call` must own what it touches.
  template <typename Fn>
  void run_collective(const CallName& op, Fn&& call);
  /// Gloo's alltoallv of `in` into `out` by byte counts (all_to_all, reduce_scatter).
  void all_to_all_bytes(const std::string& op, const Tensor& in,
                        std::vector<std::int64_t> send_bytes, const Tensor& out,
                        std::vector<std::int64_t> recv_bytes);
  /// `msg` with " (= rank i)" after each peer address Gloo printed in it.
  std::string name_peers(const std::string& msg) const;
  void account(std::uint64_t sent, std::uint64_t received, std::uint64_t messages);
  std::shared_ptr<Work> post_p2p(bool is_send, const Tensor& t, int peer, int tag);
  /// One transfer with `peer` on a Gloo slot (a point-to-point tag's, or the
  /// direct collectives').
  std::shared_ptr<Work> post_transfer(bool is_send, const Tensor& t, int peer, std::uint64_t slot,
                                      const P2PName& what);
  /// Posts the messages of a collective run as point-to-point messages, on
  /// the direct collectives' slot, each named by the collective.
  DirectAllreduce::Post collective_post(const CollectiveName& name);
  /// Small collectives as one round of point-to-point messages
  /// (core/detail/direct_collectives.h), on the caller's thread: their
  /// waits are point-to-point waits, which abort() ends directly.
  void allreduce_direct(Tensor& t, ReduceOp op);
  /// A larger allreduce by recursive halving and doubling (2 log2 P
  /// latencies where the ring takes 2(P-1)), on the same slot and thread.
  void allreduce_halving_doubling(Tensor& t, ReduceOp op);
  void allgather_direct(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts,
                        bool in_place);

  const int rank_;
  const int size_;
  const std::vector<int> global_ranks_;
  const std::shared_ptr<Store> store_;
  const std::string prefix_;  // this group's namespace in the store
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<::gloo::transport::Device> device_;  // null for a world of one
  // Started by the destructor, ended after the members below: the loop turns
  // at once while the connections close (event_loop_device.h).
  EventLoopHurry teardown_hurry_{device_};
  std::shared_ptr<::gloo::Context> context_;  // null when size() == 1
  BufferPool pool_;  // after context_: its buffers go before the connections
  CollectiveThread collectives_;
  // Point-to-point with members on this host (null: all over TCP). After
  // context_: set up once the pairs connected.
  std::shared_ptr<ShmChannel> shm_;
  bool one_host_ = false;  // every member on this host, shared memory on; set in connect()
  std::vector<std::pair<std::unique_ptr<::gloo::transport::UnboundBuffer>, Tensor>> parked_;

  mutable std::mutex mutex_;
  std::string failure_;  // the first failure; empty while healthy
  std::vector<std::pair<::gloo::transport::UnboundBuffer*, bool>> waiting_;  // (buffer, is_send)
  std::map<std::vector<int>, int> subgroups_made_;  // per member list, for unique prefixes
  // Gloo names a failed connection by the peer's address ("[127.0.0.1]:687");
  // this maps those strings to group ranks. Written once, in connect().
  std::map<std::string, int> peer_by_address_;
};

}  // namespace dtensor::gloo_backend
