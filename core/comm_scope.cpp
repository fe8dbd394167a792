#include "dtensor/core/comm_scope.h"

#include <mutex>

#include "core/detail/operator_profile.h"

namespace dtensor::detail {
namespace {

struct Record {
  std::mutex mutex;
  std::string_view op;  // valid while `active`: the scope that set it is alive
  std::uint64_t call = 0;
  std::uint64_t next = 0;
  bool active = false;
  std::chrono::steady_clock::time_point since;
  // Set while the call's thread is in a CommWaitScope.
  std::optional<std::chrono::steady_clock::time_point> blocked_since;
};
Record& record() {
  static auto* r = new Record();  // never destroyed: scopes may close during exit
  return *r;
}
thread_local int t_depth = 0;       // CommScopes open on this thread
thread_local int t_wait_depth = 0;  // CommWaitScopes open on this thread

}  // namespace

CommScope::CommScope(std::string_view op) : outermost_(t_depth++ == 0), op_(op) {
  if (!outermost_) return;
  const auto now = std::chrono::steady_clock::now();
  if (operator_profiling_on()) {  // the profile's clock is the same steady_clock
    comm_before_ns_ = call_began();
    start_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  }
  Record& r = record();
  std::lock_guard lock(r.mutex);
  r.op = op;
  r.call = r.next++;
  r.active = true;
  r.since = now;
}

CommScope::~CommScope() {
  --t_depth;
  if (!outermost_) return;
  {
    Record& r = record();
    std::lock_guard lock(r.mutex);
    r.active = false;
    r.blocked_since.reset();
    r.op = {};
  }
  if (start_ns_ >= 0) call_ended(op_, start_ns_, comm_before_ns_);
}

CommWaitScope::CommWaitScope() : counted_(t_depth > 0) {
  if (!counted_ || t_wait_depth++ > 0) return;
  Record& r = record();
  std::lock_guard lock(r.mutex);
  r.blocked_since = std::chrono::steady_clock::now();
}

CommWaitScope::~CommWaitScope() {
  if (!counted_ || --t_wait_depth > 0) return;
  Record& r = record();
  std::lock_guard lock(r.mutex);
  r.blocked_since.reset();
}

std::optional<CurrentCall> current_call() {
  Record& r = record();
  std::lock_guard lock(r.mutex);
  if (!r.active) return std::nullopt;
  return CurrentCall{std::string(r.op), r.call, r.since, r.blocked_since};
}

std::uint64_t current_call_number() {
  Record& r = record();
  std::lock_guard lock(r.mutex);
  return r.active || r.next == 0 ? r.call : r.next - 1;
}

std::uint64_t next_call_index() {
  Record& r = record();
  std::lock_guard lock(r.mutex);
  return r.next;
}

void reset_call_numbers() {
  Record& r = record();
  std::lock_guard lock(r.mutex);
  r.next = 0;
}

}  // namespace dtensor::detail
