// The communication interface the rest of the library programs against.
// Implementations live in backends/ (Gloo for CPU tensors, NCCL for CUDA).
//
// All tensors passed to a ProcessGroup must be contiguous. Ranks are ranks of
// this group (0 .. size()-1), never global ranks, so a group of a mesh
// dimension is addressed exactly like the world. The groups init_process_group
// hands out check every argument the same way whatever the backend, and
// deliver a message a rank sends to itself (docs/backends.md, "One contract").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor {

enum class ReduceOp { Sum, Avg, Max, Min };
std::string_view reduce_op_name(ReduceOp op);

/// A pending operation. wait() rethrows its failure (CommError / TimeoutError).
class Work {
 public:
  virtual ~Work() = default;
  /// Waits at most `timeout` (a negative value means the group's default timeout).
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) = 0;
};

/// Waits for every handle, then rethrows the first failure (so no buffer is
/// released while a peer may still write into it).
void wait_all(std::vector<std::shared_ptr<Work>>& works,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));

/// One entry of a batched point-to-point exchange.
struct P2POp {
  enum class Kind { Send, Recv };
  Kind kind{};
  Tensor tensor{};  // contiguous; for Recv, the destination
  int peer{};       // rank in the group
  int tag = 0;
  static P2POp send(const Tensor& t, int peer, int tag = 0) { return {Kind::Send, t, peer, tag}; }
  static P2POp recv(const Tensor& t, int peer, int tag = 0) { return {Kind::Recv, t, peer, tag}; }
};

/// Traffic counters, kept by every backend: the benchmarks and tests read them to
/// check that only halo bytes cross the wire.
struct CommCounters {
  std::atomic<std::uint64_t> bytes_sent{0};
  std::atomic<std::uint64_t> bytes_received{0};
  std::atomic<std::uint64_t> messages_sent{0};
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;
  /// Global (world) ranks of the members, in group-rank order.
  virtual const std::vector<int>& global_ranks() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // ---- point to point ----
  virtual std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag = 0) = 0;
  /// Posts all operations, receives first, and returns one handle per op.
  virtual std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops);

  // ---- collectives (blocking, bounded by timeout()) ----
  virtual void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  /// Rank r contributes `in` (counts[r] elements); `out` (sum of counts) receives
  /// every contribution in rank order. Uneven and zero counts are fine.
  virtual void allgather(const Tensor& in, Tensor& out,
                         const std::vector<std::int64_t>& counts) = 0;
  /// `in` holds size() consecutive blocks of counts[q] elements; rank r receives
  /// the reduction of everyone's block r in `out` (counts[r] elements).
  virtual void reduce_scatter(const Tensor& in, Tensor& out,
                              const std::vector<std::int64_t>& counts,
                              ReduceOp op = ReduceOp::Sum) = 0;
  /// `in` holds send_counts[q] elements for each rank q in order; `out` receives
  /// recv_counts[q] from each q in order.
  virtual void all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                          Tensor& out, const std::vector<std::int64_t>& recv_counts) = 0;
  virtual void barrier() = 0;

  /// A group of the given members (ranks of THIS group, strictly increasing).
  /// Only the members call it; members must create their groups in the same order.
  virtual std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) = 0;

  /// Splits this group into disjoint subgroups in one collective call: EVERY
  /// rank of this group calls it, in the same order, with the same `groups`
  /// (lists of ranks of this group, each strictly increasing, no rank twice),
  /// and gets the group of the list it is in, or nullptr when it is in none.
  /// InvalidArgument naming `groups` (on every rank) for bad lists. The
  /// default makes the rank's own group with new_subgroup; NCCL overrides it
  /// with one ncclCommSplit of this group's communicator (which needs every
  /// rank of the parent, hence the collective contract).
  virtual std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups);

  /// Whether point-to-point messages of `device` tensors are matched by
  /// (peer, tag), so that messages sent with different tags never meet
  /// (Gloo), rather than by their order alone (NCCL). Operator handlers post
  /// exchanges before the dispatcher's agreement check is confirmed only
  /// where this holds (docs/custom-operators.md). False unless a backend
  /// says otherwise: the safe answer for one that does not know.
  virtual bool matches_by_tag(DeviceType device) const;

  /// Whether this group carries tensors on `device`. Every group a backend
  /// factory makes is checked against it before the backend sees a tensor
  /// (docs/backends.md, "One contract"). CPU only unless a backend says
  /// otherwise.
  virtual bool accepts_device(Device device) const;

  /// What one point-to-point message between two ranks of this group costs
  /// beyond its bytes, in seconds, as the backend estimates it: the halo
  /// chains' cost model (dtensor/ops/halo_chain.h) weighs the messages a
  /// fused chain saves by it. The same on every rank of the group, so that
  /// every rank decides alike. The default, 40 us, is a message between two
  /// ranks of one host over Gloo's TCP pairs.
  virtual double message_seconds() const;

  /// Makes every pending and later operation of this group fail promptly
  /// with CommError naming `reason` (the fault monitor calls it when another
  /// rank failed). The default does nothing: operations still end at their
  /// timeout.
  virtual void abort(const std::string& reason);

  /// Virtual so that a wrapping group (the fault monitor's) reports its inner group's.
  virtual CommCounters& counters() { return counters_; }
  virtual const CommCounters& counters() const { return counters_; }

  /// Numbers the operator calls dispatched on this group: 0, 1, 2, ... The
  /// n-th call gets n on every rank that makes the same calls, so the number
  /// can go into the call's agreement fingerprint and message tags.
  std::uint64_t next_call_number() { return calls_.fetch_add(1); }

 protected:
  CommCounters counters_;

 private:
  std::atomic<std::uint64_t> calls_{0};
};

}  // namespace dtensor
