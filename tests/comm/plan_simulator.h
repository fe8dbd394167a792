// Runs the plans of every rank of a group together in one process, as the
// collectives' plan tests need (halving_doubling_plan_tests.cpp,
// bruck_allgather_plan_tests.cpp): a step first sends its message, if it
// has one, into the queue of its (sender, receiver) pair, then waits until
// the queue from its source holds a message, and takes it. Queues are FIFO
// per pair, as the group's messages on one slot are.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace dtensor::testing {

/// Where a step's messages go: the rank it sends to and the rank it
/// receives from, -1 for none.
struct StepPeers {
  int send_to = -1, recv_from = -1;
};

/// Runs plans[r] (the steps of rank r) for every rank; `peers(r, step)` tells
/// a step's peers, `make(r, step)` builds the message it sends, `take(r, step,
/// message)` hands it the one it receives. Returns whether every step ran
/// and no message was left unread: false is a deadlock or a stray message.
template <typename Message, typename Step, typename Peers, typename Make, typename Take>
bool run_plans_together(const std::vector<std::vector<Step>>& plans, Peers peers, Make make,
                        Take take) {
  const std::size_t size = plans.size();
  std::map<std::pair<int, int>, std::deque<Message>> queues;  // (from, to)
  std::vector<std::size_t> next(size, 0);
  std::vector<bool> sent(size, false);
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t r = 0; r < size; ++r) {
      if (next[r] == plans[r].size()) continue;
      const Step& step = plans[r][next[r]];
      const int me = static_cast<int>(r);
      const StepPeers p = peers(me, step);
      if (!sent[r]) {
        sent[r] = true;
        moved = true;
        if (p.send_to >= 0) queues[{me, p.send_to}].push_back(make(me, step));
      }
      if (p.recv_from >= 0) {
        auto& q = queues[{p.recv_from, me}];
        if (q.empty()) continue;  // waits for the peer
        const Message m = std::move(q.front());
        q.pop_front();
        take(me, step, m);
      }
      ++next[r];
      sent[r] = false;
      moved = true;
    }
  }
  for (std::size_t r = 0; r < size; ++r)
    if (next[r] != plans[r].size()) return false;
  for (const auto& [pair, q] : queues)
    if (!q.empty()) return false;
  return true;
}

}  // namespace dtensor::testing
