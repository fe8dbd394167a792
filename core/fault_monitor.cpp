#include "core/detail/fault_monitor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/detail/comm_scope.h"
#include "core/detail/flight_recorder.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::mutex g_monitor_mutex;
std::shared_ptr<FaultMonitor> g_monitor;

volatile std::sig_atomic_t g_dump_requested = 0;
extern "C" void on_sigusr1(int) {
  g_dump_requested = 1;
}

// SIGUSR1 asks every rank for its flight recorder; an application that
// installed its own handler keeps it.
void handle_sigusr1_unless_handled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGUSR1, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  });
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
  std::lock_guard lock(g_monitor_mutex);
  return g_monitor;
}

void set_fault_monitor(std::shared_ptr<FaultMonitor> monitor) {
  std::shared_ptr<FaultMonitor> old;
  {
    std::lock_guard lock(g_monitor_mutex);
    old = std::exchange(g_monitor, std::move(monitor));
  }
  // `old` stops its thread here, outside the lock.
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
  neighbour_alive_at_ = Clock::now();
  {
    std::lock_guard lock(store_mutex_);
    store_->set(key(fmt::format("pid/{}", rank_)),
                to_bytes(fmt::format("{} {}", host_name(), getpid())));
  }
  handle_sigusr1_unless_handled();
  thread_ = std::thread([this] { run(); });
}

FaultMonitor::~FaultMonitor() {
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
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
  const auto until = Clock::now() + grace;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (failure_) {
        if (remote_failed_) return failure_;
        return std::nullopt;  // this rank's own failure: its error says it best
      }
    }
    try {
      std::unique_lock lock(store_mutex_);
      if (has(key("abort"))) {
        const std::string msg = read(key("abort"));
        lock.unlock();
        adopt(msg, true);
        return msg;
      }
    } catch (const std::exception& e) {
      log::debug("monitor: cannot read the abort key: {}", e.what());
      return std::nullopt;
    }
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

void FaultMonitor::fail_local(const std::string& reason) {
  try {
    publish_failure(fmt::format("rank {} failed: {}", rank_, reason), false);
  } catch (const std::exception& e) {
    log::warn("monitor: could not report this rank's failure: {}", e.what());
  }
}

void FaultMonitor::leave() {
  try {
    std::lock_guard lock(store_mutex_);
    store_->set(key(fmt::format("left/{}", rank_)), to_bytes("1"));
  } catch (const std::exception& e) {
    log::debug("monitor: cannot say this rank left: {}", e.what());
  }
  std::lock_guard lock(stop_mutex_);
  stop_ = true;
  stop_cv_.notify_all();
}

std::string FaultMonitor::dump(const char* why) {
  const std::string path = FlightRecorder::write_to(settings_.recorder_dir);
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
    std::lock_guard lock(store_mutex_);
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
    std::lock_guard lock(mutex_);
    if (failure_) return;
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
}

void FaultMonitor::run() {
  while (true) {
    {
      std::unique_lock lock(stop_mutex_);
      if (stop_cv_.wait_for(lock, tick_, [this] { return stop_; })) return;
    }
    if (g_dump_requested) {
      g_dump_requested = 0;
      dump("SIGUSR1");
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A store that hiccups must not end the monitor: try again next tick.
      log::debug("monitor: {}", e.what());
    }
  }
}

void FaultMonitor::step() {
  heartbeat();
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;  // known and acted on; keep beating so nobody names us
  }
  {
    std::unique_lock lock(store_mutex_);
    if (has(key("abort"))) {
      const std::string msg = read(key("abort"));
      lock.unlock();
      adopt(msg, true);
      return;
    }
  }
  watch_neighbour();
  check_desync();
}

void FaultMonitor::heartbeat() {
  const auto now = Clock::now();
  if (now - last_beat_ < settings_.heartbeat_interval) return;
  last_beat_ = now;
  std::lock_guard lock(store_mutex_);
  store_->set(key(fmt::format("hb/{}/{}", rank_, beats_++)), to_bytes("1"));
}

void FaultMonitor::watch_neighbour() {
  if (!neighbour_watched_ || neighbour_ == rank_) return;
  const auto now = Clock::now();
  std::string verdict;
  {
    std::lock_guard lock(store_mutex_);
    if (!neighbour_pid_known_ && has(key(fmt::format("pid/{}", neighbour_)))) {
      neighbour_pid_known_ = true;
      std::istringstream in(read(key(fmt::format("pid/{}", neighbour_))));
      std::string host;
      int pid = 0;
      in >> host >> pid;
      if (host == host_name() && pid > 0) neighbour_pid_ = pid;
      log::debug("monitor: rank {} is pid {} on {}", neighbour_, pid, host);
    }
    if (neighbour_pid_ && !process_alive(*neighbour_pid_))
      verdict = fmt::format(
          "rank {} failed: its process (pid {}) ended without reporting an error (killed by a "
          "signal, or it exited without destroy_process_group)",
          neighbour_, *neighbour_pid_);
    // Heartbeats: looked for twice an interval, more often once late.
    if (verdict.empty() && now - neighbour_probe_at_ >= settings_.heartbeat_interval / 2) {
      neighbour_probe_at_ = now;
      while (has(key(fmt::format("hb/{}/{}", neighbour_, neighbour_beats_)))) {
        ++neighbour_beats_;
        neighbour_alive_at_ = now;
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

void FaultMonitor::check_desync() {
  const std::string verdict = desync_verdict();
  if (!verdict.empty()) publish_failure(verdict, true);
}

std::string FaultMonitor::desync_verdict() {
  const auto call = current_call();
  const auto now = Clock::now();
  std::lock_guard lock(store_mutex_);
  const bool waiting = call && now - call->since >= settings_.desync_delay;
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
