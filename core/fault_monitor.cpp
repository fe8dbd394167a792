#include "core/detail/fault_monitor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/detail/flight_recorder.h"
#include "core/detail/thread_name.h"
#include "dtensor/core/comm_scope.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/core/store_url.h"

namespace dtensor::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The process's monitor. Function-local, so that it is destroyed (at exit,
// stopping the thread) before the logger it was created after.
struct Holder {
  std::mutex mutex;
  std::shared_ptr<FaultMonitor> monitor;
  ~Holder() {
    if (monitor) monitor->stop(false, milliseconds(500));
  }
};
Holder& holder() {
  static Holder h;
  return h;
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Whether process `pid` of this host still runs (a zombie does not: it died
// and waits for its parent to collect it).
bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

std::string to_string(const std::vector<char>& v) {
  return std::string(v.begin(), v.end());
}
std::vector<char> to_bytes(const std::string& s) {
  return std::vector<char>(s.begin(), s.end());
}

// "0", "1-3", "0, 2"
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    out += (out.empty() ? "" : ", ") +
           (j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]));
    i = j + 1;
  }
  return out;
}

}  // namespace

std::shared_ptr<FaultMonitor> fault_monitor() {
  Holder& h = holder();
  std::lock_guard lock(h.mutex);
  return h.monitor;
}

void set_fault_monitor(std::shared_ptr<FaultMonitor> monitor) {
  Holder& h = holder();
  std::lock_guard lock(h.mutex);
  h.monitor = std::move(monitor);
}

void report_failure(const std::exception& e) {
  if (dynamic_cast<const InvalidArgument*>(&e) || dynamic_cast<const NotSupported*>(&e) ||
      dynamic_cast<const CommError*>(&e))
    return;
  if (auto m = fault_monitor()) m->fail_local(e.what());
}

FaultMonitor::FaultMonitor(std::shared_ptr<Store> store, int rank, int size, std::string prefix,
                           MonitorSettings settings)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      prefix_(std::move(prefix)),
      settings_(std::move(settings)),
      neighbour_((rank + 1) % size),
      // Often enough that a failure travels in well under a second, and never
      // slower than a tenth of the heartbeat interval.
      tick_(std::clamp(settings_.heartbeat_interval / 10, milliseconds(20), milliseconds(100))) {
  neighbour_alive_at_ = store_ok_at_ = Clock::now();
  store_->set(key(fmt::format("pid/{}", rank_)),
              to_bytes(fmt::format("{} {}", host_name(), getpid())));
}

std::shared_ptr<FaultMonitor> FaultMonitor::start(std::shared_ptr<Store> store, int rank, int size,
                                                  std::string prefix, MonitorSettings settings) {
  std::shared_ptr<FaultMonitor> m(
      new FaultMonitor(std::move(store), rank, size, std::move(prefix), std::move(settings)));
  // Detached, owning the monitor: a thread blocked in a store that stopped
  // answering must not block the process's exit or destroy_process_group.
  std::thread([m] {
    detail::name_this_thread("dtensor-monitor");
    m->run();
    std::lock_guard lock(m->mutex_);
    m->ended_ = true;
    m->changed_.notify_all();
  }).detach();
  return m;
}

void FaultMonitor::stop(bool left, milliseconds patience) {
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
    say_left_ = left;
  }
  stop_cv_.notify_all();
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, patience, [this] { return ended_; });
}

void FaultMonitor::watch(const std::shared_ptr<ProcessGroup>& group) {
  std::optional<std::string> failure;
  {
    std::lock_guard lock(mutex_);
    groups_.push_back(group);
    failure = failure_;
  }
  if (failure) group->abort(*failure);  // made after the job failed
}

std::optional<std::string> FaultMonitor::remote_failure() const {
  if (!remote_failed_.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lock(mutex_);
  return failure_;
}

std::optional<std::string> FaultMonitor::remote_failure_within(milliseconds grace) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, grace, [this] { return acted_ || ended_; });
  // This rank's own failure: its error says it best.
  if (!failure_ || !remote_failed_) return std::nullopt;
  return failure_;
}

void FaultMonitor::fail_local(const std::string& reason) {
  const std::string message = fmt::format("rank {} failed: {}", rank_, reason);
  {
    std::lock_guard lock(mutex_);
    if (failure_ || to_publish_) return;
    to_publish_ = message;
  }
  stop_cv_.notify_all();  // the thread publishes now rather than at its next tick
  {
    // Published first, so that peers whose connections to us close next
    // find the cause; but never waiting long on a store that does not answer.
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, milliseconds(300), [this] { return acted_ || ended_; });
  }
  adopt(message, false);  // nothing when the thread did it already
}

std::string FaultMonitor::dump(const char* why) {
  std::string path = FlightRecorder::write_to(settings_.recorder_dir);
  if (!path.empty()) log::warn("flight recorder written to {} ({})", path, why);
  return path;
}

bool FaultMonitor::has(const std::string& k) {
  return store_->check({k});
}

std::string FaultMonitor::read(const std::string& k) {
  return to_string(store_->get(k));
}

void FaultMonitor::publish_failure(const std::string& message, bool remote) {
  std::string chosen = message;
  {
    // First come, first kept: a later rank's failure is usually a consequence.
    if (has(key("abort"))) {
      chosen = read(key("abort"));
      remote = remote || chosen != message;
    } else {
      try {
        store_->set(key("abort"), to_bytes(message));
      } catch (const CommError&) {
        // Another rank set it between our look and our write (Redis refuses
        // a second set): theirs stands.
        chosen = read(key("abort"));
        remote = remote || chosen != message;
      }
    }
  }
  adopt(chosen, remote);
}

void FaultMonitor::adopt(const std::string& message, bool remote) {
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  bool dump_now = false;
  {
    std::unique_lock lock(mutex_);
    if (failure_) {
      // Another thread is acting on it: return once it has (bounded: a
      // group's abort does not block, but the recorder goes to a disk).
      changed_.wait_for(lock, milliseconds(1000), [this] { return acted_; });
      return;
    }
    failure_ = message;
    remote_failed_.store(remote, std::memory_order_release);
    for (auto& w : groups_)
      if (auto g = w.lock()) groups.push_back(std::move(g));
    dump_now = !std::exchange(dumped_, true);
  }
  log::error("{}", message);
  // Written before the groups are aborted: it shows the calls still pending
  // (state "started"), and it is on disk by the time any of them throws.
  if (dump_now) dump("the job failed");
  for (auto& g : groups) {
    try {
      g->abort(message);
    } catch (const std::exception& e) {
      log::debug("monitor: aborting a group: {}", e.what());
    }
  }
  // Only now: a caller waiting for the failure (fail_local) goes on to
  // communicate, and its groups must already refuse.
  {
    std::lock_guard lock(mutex_);
    acted_ = true;
  }
  changed_.notify_all();
}

void FaultMonitor::run() {
  while (true) {
    bool stopping, left;
    {
      std::unique_lock lock(stop_mutex_);
      stop_cv_.wait_for(lock, tick_, [this] {
        std::lock_guard inner(mutex_);
        return stop_ || to_publish_.has_value();
      });
      stopping = stop_;
      left = say_left_;
    }
    if (stopping) {
      if (left) {
        try {
          store_->set(key(fmt::format("left/{}", rank_)), to_bytes("1"));
        } catch (const std::exception& e) {
          log::debug("monitor: cannot say this rank left: {}", e.what());
        }
      }
      return;
    }
    try {
      step();
      store_answered();
    } catch (const std::exception& e) {
      // A store that hiccups must not end the monitor: try again next tick.
      store_failed(e.what());
    }
  }
}

void FaultMonitor::store_answered() {
  const auto now = Clock::now();
  if (store_warned_) {
    log::warn("monitor: the store {} answers again after {:.1f} s; failure detection goes on",
              redact_store_url(store_->url()),
              std::chrono::duration<double>(now - store_ok_at_).count());
    store_warned_ = false;
    // Its heartbeats could not be read meanwhile: the outage is not its silence.
    neighbour_alive_at_ = now;
  }
  store_ok_at_ = now;
}

void FaultMonitor::store_failed(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;  // the job has failed already; nothing is left to detect
  }
  const auto silent = Clock::now() - store_ok_at_;
  const double timeout_s = std::chrono::duration<double>(settings_.heartbeat_timeout).count();
  const std::string store = redact_store_url(store_->url());
  if (!store_warned_) {
    store_warned_ = true;
    log::warn(
        "monitor: the store {} does not answer ({}); no failure of another rank can be "
        "detected without it: the job ends unless it answers within {:g} s "
        "(DTENSOR_HEARTBEAT_TIMEOUT)",
        store, why, timeout_s);
  }
  // A neighbour on this host that died is still seen, and named.
  const std::string dead = dead_neighbour_verdict();
  if (!dead.empty()) {
    adopt(dead, true);
    return;
  }
  if (silent > settings_.heartbeat_timeout)
    adopt(fmt::format("the store {} is lost: no answer for {:.1f} s ({}); a failed or stopped "
                      "rank cannot be detected without it, so the job ends "
                      "(DTENSOR_HEARTBEAT_TIMEOUT={:g})",
                      store, std::chrono::duration<double>(silent).count(), why, timeout_s),
          true);
}

void FaultMonitor::publish_pending() {
  std::optional<std::string> message;
  {
    std::lock_guard lock(mutex_);
    message = std::exchange(to_publish_, std::nullopt);
  }
  if (message) publish_failure(*message, false);
}

void FaultMonitor::step() {
  publish_pending();
  heartbeat();
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;  // known and acted on; keep beating so nobody names us
  }
  if (has(key("abort"))) {
    adopt(read(key("abort")), true);
    return;
  }
  watch_neighbour();
  check_desync();
}

void FaultMonitor::heartbeat() {
  const auto now = Clock::now();
  if (now - last_beat_ < settings_.heartbeat_interval) return;
  last_beat_ = now;
  // One key per rank, overwritten with a count: a long job leaves one key
  // per rank in the store, not one per beat.
  store_->set(key(fmt::format("hb/{}", rank_)), to_bytes(std::to_string(++beats_)));
}

void FaultMonitor::watch_neighbour() {
  if (!neighbour_watched_ || neighbour_ == rank_) return;
  const auto now = Clock::now();
  std::string verdict;
  {
    if (!neighbour_pid_known_ && has(key(fmt::format("pid/{}", neighbour_)))) {
      neighbour_pid_known_ = true;
      std::istringstream in(read(key(fmt::format("pid/{}", neighbour_))));
      std::string host;
      int pid = 0;
      in >> host >> pid;
      if (host == host_name() && pid > 0) neighbour_pid_ = pid;
      log::debug("monitor: rank {} is pid {} on {}", neighbour_, pid, host);
    }
    verdict = dead_neighbour_verdict();
    // Heartbeats: looked for twice an interval, more often once late.
    if (verdict.empty() && now - neighbour_probe_at_ >= settings_.heartbeat_interval / 2) {
      neighbour_probe_at_ = now;
      const std::string beat_key = key(fmt::format("hb/{}", neighbour_));
      if (has(beat_key)) {
        const std::string beat = read(beat_key);
        if (beat != neighbour_last_beat_) {
          neighbour_last_beat_ = beat;
          neighbour_alive_at_ = now;
        }
      }
      const auto silent = now - neighbour_alive_at_;
      if (silent > settings_.heartbeat_timeout)
        verdict = fmt::format(
            "rank {} failed: no heartbeat for {:.1f} s (the process is stopped, e.g. by "
            "SIGSTOP or a debugger, or frozen; DTENSOR_HEARTBEAT_TIMEOUT={:g})",
            neighbour_, std::chrono::duration<double>(silent).count(),
            settings_.heartbeat_timeout.count() / 1000.0);
    }
    if (!verdict.empty() && has(key(fmt::format("left/{}", neighbour_)))) {
      neighbour_watched_ = false;  // it finished normally
      return;
    }
  }
  if (!verdict.empty()) publish_failure(verdict, true);
}

std::string FaultMonitor::dead_neighbour_verdict() const {
  if (!neighbour_watched_ || !neighbour_pid_ || process_alive(*neighbour_pid_)) return "";
  return fmt::format(
      "rank {} failed: its process (pid {}) ended without telling the other ranks why "
      "(killed by a signal, or it exited without destroy_process_group; its own output "
      "says more)",
      neighbour_, *neighbour_pid_);
}

void FaultMonitor::check_desync() {
  const std::string verdict = desync_verdict();
  if (!verdict.empty()) publish_failure(verdict, true);
}

std::string FaultMonitor::desync_verdict() {
  const auto call = current_call();
  const auto now = Clock::now();
  // Blocked on the others for the delay, not merely inside the call: a rank
  // computing through a long call (a big kernel, a debugger's or valgrind's
  // slowness) while its peer waits a call or two ahead is slow, not diverged.
  const bool waiting =
      call && call->blocked_since && now - *call->blocked_since >= settings_.desync_delay;
  if (!waiting) {
    if (desync_posted_call_) {
      // Unstuck after all: say so, or a peer would compare with a stale call.
      store_->set(key(fmt::format("desync/{}/{}", rank_, desync_posts_++)),
                  to_bytes(fmt::format("done {}", *desync_posted_call_)));
      desync_posted_call_.reset();
    }
    return "";
  }
  const std::string mine = fmt::format("{} {}", call->call, call->op);
  if (desync_posted_call_ != call->call) {
    store_->set(key(fmt::format("desync/{}/{}", rank_, desync_posts_++)),
                to_bytes("waiting " + mine));
    desync_posted_call_ = call->call;
  }
  if (now - desync_compared_at_ < milliseconds(500)) return "";
  desync_compared_at_ = now;
  std::map<std::string, std::vector<int>> by_call;  // "<call> <op>" -> ranks
  by_call[mine].push_back(rank_);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    std::uint64_t& seen = peer_posts_seen_[q];
    while (has(key(fmt::format("desync/{}/{}", q, seen))))
      peer_state_[q] = read(key(fmt::format("desync/{}/{}", q, seen++)));
    const std::string& s = peer_state_[q];
    if (s.rfind("waiting ", 0) != 0) return "";  // busy elsewhere, or not waiting long yet
    by_call[s.substr(8)].push_back(q);
  }
  if (by_call.size() == 1) return "";  // all in the same call: slow, not diverged
  std::vector<std::pair<std::vector<int>, std::string>> groups;
  for (auto& [c, ranks] : by_call) {
    std::sort(ranks.begin(), ranks.end());
    const auto space = c.find(' ');
    groups.emplace_back(ranks,
                        fmt::format("{} (call {})", c.substr(space + 1), c.substr(0, space)));
  }
  std::sort(groups.begin(), groups.end());
  std::string msg = "ranks are in different communication calls (desync): ";
  for (std::size_t i = 0; i < groups.size(); ++i)
    msg += fmt::format("{}{} {} {} in {}", i ? "; " : "",
                       groups[i].first.size() > 1 ? "ranks" : "rank", rank_list(groups[i].first),
                       groups[i].first.size() > 1 ? "are" : "is", groups[i].second);
  return msg;
}

}  // namespace dtensor::detail
