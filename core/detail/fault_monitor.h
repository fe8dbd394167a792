// The fault monitor: one thread per process of a multi-rank job, started by
// init_process_group, that uses the rendezvous store as a channel beside the
// data connections, so that one rank's failure reaches every rank within
// about a second instead of at the operation timeout:
//
//  - failure: the first rank to fail publishes "rank R failed: <reason>"
//    under the job's abort key; every monitor polls that key and aborts its
//    process's groups (pending waits and later calls throw CommError with
//    that text, see MonitoredProcessGroup);
//  - death: each rank watches the next one; on one host a process that is
//    gone (or a zombie) is seen within a tick;
//  - stall: each rank writes a heartbeat key every heartbeat interval; one
//    that writes none for the heartbeat timeout (SIGSTOP, a debugger) is named;
//  - desync: when this rank's current call (dtensor/core/comm_scope.h) has
//    waited for the desync delay, it publishes (call number, operation); once
//    every rank has published and they differ, every rank raises one message
//    naming each rank's call.
//
// Store keys live under "dtensor.monitor/<world>/" and are only ever created
// (never overwritten: Gloo's Redis store cannot), so heartbeats are numbered.
//
// Only the monitor thread touches the store: a store that stops answering
// (the network to Redis cut) blocks that thread, never a caller's error
// path, and the thread is detached when it does not stop in time.
//
// Without the store the monitor can detect nothing (but a neighbour's death
// on this host), so losing it is never silent: the first failed tick is a
// warning naming the store, and a store that has not answered for the
// heartbeat timeout ends the job on every rank with an error naming it
// (every rank's monitor sees the same store gone), rather than leave a
// stopped rank to be found only at DTENSOR_TIMEOUT.
#pragma once

#include "dtensor/core/fault.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/core/store.h"

namespace dtensor::detail {

struct MonitorSettings {
  std::chrono::milliseconds heartbeat_interval{2000};
  std::chrono::milliseconds heartbeat_timeout{20000};
  std::chrono::milliseconds desync_delay{3000};
  std::string recorder_dir;
};

class FaultMonitor {
 public:
  /// Starts the monitor thread. `store` is the monitor's own connection (a
  /// Redis connection is not shared between threads); `prefix` names this
  /// world's keys.
  static std::shared_ptr<FaultMonitor> start(std::shared_ptr<Store> store, int rank, int size,
                                             std::string prefix, MonitorSettings settings);
  FaultMonitor(const FaultMonitor&) = delete;
  FaultMonitor& operator=(const FaultMonitor&) = delete;

  /// A group to abort when the job fails (held weakly).
  void watch(const std::shared_ptr<ProcessGroup>& group);

  /// The job's failure as another rank (or this rank's monitor, about
  /// another rank) reported it; empty while none is known. Cheap.
  std::optional<std::string> remote_failure() const;
  /// On an error path: the remote failure, waiting up to `grace` for the
  /// monitor thread to learn one (a peer publishes before it closes its
  /// connections, but the closed connection may be seen first).
  std::optional<std::string> remote_failure_within(std::chrono::milliseconds grace);
  /// This rank failed: has "rank R failed: <reason>" published unless the
  /// job's failure is already known, aborts this process's groups and
  /// writes the flight recorder. Waits at most a moment for the store, so
  /// that the cause is out before the connections close. Never throws.
  void fail_local(const std::string& reason);
  /// Stops the thread; with `left`, it first says this rank left normally
  /// (destroy_process_group), so that its watcher does not report it. Waits
  /// at most `patience`, then leaves the thread to end on its own.
  void stop(bool left, std::chrono::milliseconds patience);
  /// Writes the flight recorder now; returns the path ("" if not written).
  std::string dump(const char* why);

 private:
  FaultMonitor(std::shared_ptr<Store> store, int rank, int size, std::string prefix,
               MonitorSettings settings);
  void run();
  void step();
  void publish_pending();
  bool has(const std::string& key);
  std::string read(const std::string& key);
  std::string key(const std::string& suffix) const { return prefix_ + "/" + suffix; }
  /// Publishes `message` as the job's failure unless one is already there
  /// (then adopts that one). `remote`: whether this process's calls should
  /// throw it (true unless it is this rank's own failure).
  void publish_failure(const std::string& message, bool remote);
  void adopt(const std::string& message, bool remote);
  void heartbeat();
  void watch_neighbour();
  /// "rank N failed: its process ... ended" when the neighbour ran on this
  /// host and is gone (seen through /proc, without the store); else "".
  std::string dead_neighbour_verdict() const;
  /// After each tick: the store answered, or it did not (`why`).
  void store_answered();
  void store_failed(const std::string& why);
  void check_desync();
  /// The desync message once every rank waits in a call and they differ; else "".
  std::string desync_verdict();

  const std::shared_ptr<Store> store_;
  const int rank_, size_;
  const std::string prefix_;
  const MonitorSettings settings_;
  const int neighbour_;
  const std::chrono::milliseconds tick_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // failure_ set, or the thread ended
  std::optional<std::string> failure_;
  bool acted_ = false;                     // failure_'s groups aborted and recorder written
  std::optional<std::string> to_publish_;  // this rank's failure, for the thread to publish
  std::atomic<bool> remote_failed_{false};
  std::vector<std::weak_ptr<ProcessGroup>> groups_;
  bool dumped_ = false;

  // Monitor-thread state.
  std::uint64_t beats_ = 0;
  std::chrono::steady_clock::time_point last_beat_{};
  std::string neighbour_last_beat_;  // the count its heartbeat key held when last read
  std::chrono::steady_clock::time_point neighbour_alive_at_, neighbour_probe_at_{};
  bool neighbour_watched_ = true;
  std::optional<int> neighbour_pid_;  // set when it runs on this host
  bool neighbour_pid_known_ = false;
  std::uint64_t desync_posts_ = 0;
  std::optional<std::uint64_t> desync_posted_call_;
  std::chrono::steady_clock::time_point desync_compared_at_{};
  std::chrono::steady_clock::time_point store_ok_at_;  // the last tick the store answered
  bool store_warned_ = false;                          // this outage was logged
  std::map<int, std::uint64_t> peer_posts_seen_;
  std::map<int, std::string> peer_state_;

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;  // wakes the thread: stop, or something to publish
  bool stop_ = false;
  bool say_left_ = false;
  bool ended_ = false;  // under mutex_
};

/// The process's monitor (null before init_process_group, after
/// destroy_process_group, and in a world of one).
std::shared_ptr<FaultMonitor> fault_monitor();
void set_fault_monitor(std::shared_ptr<FaultMonitor> monitor);

// report_failure(e) is declared in dtensor/core/fault.h (dispatch, above
// core, calls it).

}  // namespace dtensor::detail
