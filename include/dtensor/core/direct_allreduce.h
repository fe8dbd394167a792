// A small allreduce as one round of point-to-point messages, posted before
// the caller waits for anything else.
//
// A collective cannot start before the ranks have agreed on what they are
// doing (a rank asked something else could hang in it, or meet messages of
// another size), so an agreement check in front of it costs a round of its
// own. Point-to-point messages under a tag that only ranks making the same
// call use can be posted first: the check's messages and the data then
// travel together, and the caller confirms the check before waiting for the
// data (placement/rank_agreement.h). For a small allreduce that is also the
// fastest algorithm: one latency where a ring takes 2(P-1) (the CPU group's
// own collectives choose it by the same rule, core/detail/direct_collectives.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/core/tensor.h"

namespace dtensor {

/// Whether an allreduce of `bytes` per rank over `group` may run as a
/// DirectAllreduce of `t`: a CPU tensor, on a group that matches messages by
/// tag, small enough that each rank receives at most 256 KiB, on a group
/// where one round of P-1 messages is the cheapest allreduce (the CPU
/// group's rule, core/detail/direct_collectives.h: below ~1000 ranks for a
/// small tensor).
bool fits_direct_allreduce(const ProcessGroup& group, const Tensor& t);
/// The same for `bytes` per rank on `device`.
bool fits_direct_allreduce(const ProcessGroup& group, std::uint64_t bytes, DeviceType device);

class DirectAllreduce {
 public:
  /// Posts one message of the exchange (a receive or a send of `op.tensor`
  /// with `op.peer`) and returns its handle.
  using Post = std::function<std::shared_ptr<Work>(const P2POp& op)>;

  /// Posts the messages: `t` (contiguous, CPU) to every other rank of
  /// `group` and theirs into a buffer of this handle, all under `tag`. `t`
  /// must stay alive and unchanged until finish().
  DirectAllreduce(ProcessGroup& group, Tensor t, ReduceOp op, int tag);
  /// The same exchange among `size` ranks, each message posted by `post`
  /// (the receives first): for a backend that sends them its own way.
  DirectAllreduce(int rank, int size, Tensor t, ReduceOp op, const Post& post);
  /// Waits for the messages, writes the reduction into `t` (the
  /// contributions combined in rank order, so every rank gets the same bits)
  /// and returns it.
  Tensor finish();

 private:
  Tensor t_, all_;  // all_: every rank's contribution, in rank order
  ReduceOp op_;
  int rank_, size_;
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace dtensor
