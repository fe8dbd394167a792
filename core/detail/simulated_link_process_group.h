// A benchmark aid: the CPU backend's group behind a simulated slow link, for
// measuring spatial parallelism over a slower network than the one at hand
// (DTENSOR_SIM_LINK, docs/performance.md "Slow links, simulated").
//
//  - Point to point: isend returns at once; the message is handed to the
//    backend when it would have arrived over a link of the configured latency
//    and bandwidth: at depart + bytes / bandwidth + latency, where depart is
//    the later of now and the moment the link to that peer is free, and the
//    link then stays busy for bytes / bandwidth (back-to-back messages queue
//    as on a wire). One delay thread per group hands messages over in due
//    order, FIFO per peer, so the order per (peer, tag) is kept. The Work
//    completes when the backend's send does; its failure reaches wait().
//    Receives pass through: the receiver sees the delay as late data.
//  - Collectives sleep for a ring/tree model of their cost before running
//    (formulas in the .cpp and in docs/performance.md).
//  - Subgroups are wrapped alike and share the world's link clocks (a link
//    joins two processes, whichever group a message travels in).
//
// Not modelled: jitter, loss, contention between peers or with collectives.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/core/config.h"
#include "dtensor/core/forwarding_process_group.h"

namespace dtensor::detail {

using SimClock = std::chrono::steady_clock;

/// When each link of this process is free again, by the peer's world rank;
/// shared by a group and every subgroup made from it.
class SimulatedLinks {
 public:
  explicit SimulatedLinks(const Config::SimLink& link) : link_(link) {}
  const Config::SimLink& link() const { return link_; }
  /// How long `bytes` occupy a link (zero when the bandwidth is unlimited).
  SimClock::duration transfer_time(std::uint64_t bytes) const;
  SimClock::duration latency() const;
  /// Books the link to `peer` for a message of `bytes` sent now and returns
  /// when it arrives.
  SimClock::time_point book(int peer, std::uint64_t bytes);

 private:
  const Config::SimLink link_;
  std::mutex mutex_;
  std::map<int, SimClock::time_point> free_at_;
};

class SimulatedLinkProcessGroup final : public ForwardingProcessGroup {
 public:
  /// `inner` behind a link as `link` says; null stays null.
  static std::shared_ptr<ProcessGroup> wrap(std::shared_ptr<ProcessGroup> inner,
                                            const Config::SimLink& link);
  ~SimulatedLinkProcessGroup() override;

  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) override;
  std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag = 0) override;
  std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops) override;
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& t, int root) override;
  void allgather(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts) override;
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& counts,
                      ReduceOp op = ReduceOp::Sum) override;
  void all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                  const std::vector<std::int64_t>& recv_counts) override;
  void barrier() override;
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override;
  /// Fails the messages still on the link, stops the delay thread, then
  /// aborts the backend's group.
  void abort(const std::string& reason) override;

  struct Message;

 private:
  SimulatedLinkProcessGroup(std::shared_ptr<ProcessGroup> inner,
                            std::shared_ptr<SimulatedLinks> links);
  std::shared_ptr<ProcessGroup> wrap_subgroup(std::shared_ptr<ProcessGroup> sub) const;
  std::shared_ptr<Work> post_send(const Tensor& t, int dst, int tag);
  void deliver(Message& m);
  void delay_loop();
  /// Sleeps `d` (a collective's modelled cost); ends early on abort.
  void sleep_for(SimClock::duration d);
  /// Stops the delay thread; messages not yet handed over fail with `why`.
  void stop(const std::string& why);

  const std::shared_ptr<SimulatedLinks> links_;
  std::mutex mutex_;
  std::condition_variable cv_;
  // Messages by due time; equal times keep their insertion order, and a
  // peer's messages are due in the order they were sent (its link is booked
  // in order), so the queue is FIFO per peer.
  std::multimap<SimClock::time_point, std::shared_ptr<Message>> queue_;
  std::string stopped_;  // why the link stopped; empty while running
  std::thread thread_;   // started with the first send
  std::mutex
      post_mutex_;  // one post into the backend at a time (the delay thread's and the caller's)
};

}  // namespace dtensor::detail
