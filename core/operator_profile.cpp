#include "dtensor/core/profile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "core/detail/operator_profile.h"

namespace dtensor {
namespace detail {

std::atomic<bool> g_operator_profiling{false};

namespace {

constexpr std::string_view kOutsideCalls = "(outside calls)";

struct Totals {
  std::int64_t calls = 0, ns = 0, comm_ns = 0;
};
// A kernel's row: its name, device type and dtype.
using KernelKey = std::tuple<std::string, DeviceType, DType>;
using KernelKeyView = std::tuple<std::string_view, DeviceType, DType>;
// Orders keys and views of keys alike, so that a call finds its row without
// building a string.
struct KernelKeyLess {
  using is_transparent = void;
  static KernelKeyView view(const KernelKey& k) {
    return {std::get<0>(k), std::get<1>(k), std::get<2>(k)};
  }
  static const KernelKeyView& view(const KernelKeyView& k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return view(a) < view(b);
  }
};
struct Profile {
  std::mutex mutex;
  std::map<std::string, Totals, std::less<>> by_op;
  std::map<KernelKey, Totals, KernelKeyLess> by_kernel;
};
Profile& profile() {
  static auto* p = new Profile();  // never destroyed: calls may end during exit
  return *p;
}
// This thread's communication time, and whether it has a call open (the
// call's own bookkeeping is on its stack, in CommScope).
thread_local std::int64_t t_comm_ns = 0;
thread_local bool t_in_call = false;
// Kernels open on this thread: only the outermost is timed.
thread_local int t_kernel_depth = 0;

void add(std::string_view op, std::int64_t calls, std::int64_t ns, std::int64_t comm_ns) {
  Profile& p = profile();
  std::lock_guard lock(p.mutex);
  auto it = p.by_op.find(op);
  if (it == p.by_op.end()) it = p.by_op.emplace(std::string(op), Totals{}).first;
  it->second.calls += calls;
  it->second.ns += ns;
  it->second.comm_ns += comm_ns;
}

}  // namespace

std::int64_t call_began() {
  t_in_call = true;
  return t_comm_ns;
}

void call_ended(std::string_view op, std::int64_t start_ns, std::int64_t comm_before_ns) {
  t_in_call = false;
  add(op, 1, profile_clock_ns() - start_ns, t_comm_ns - comm_before_ns);
}

void add_comm_time(std::int64_t ns) {
  t_comm_ns += ns;
  if (!t_in_call) add(kOutsideCalls, 0, ns, ns);
}

KernelTimer::KernelTimer(const char* kernel, DeviceType device, DType dtype)
    : kernel_(kernel), device_(device), dtype_(dtype) {
  if (!operator_profiling_on()) return;
  counted_ = true;
  if (t_kernel_depth++ == 0) start_ns_ = profile_clock_ns();
}

KernelTimer::~KernelTimer() {
  if (!counted_) return;
  --t_kernel_depth;
  if (start_ns_ < 0) return;
  const std::int64_t ns = profile_clock_ns() - start_ns_;
  Profile& p = profile();
  std::lock_guard lock(p.mutex);
  const KernelKeyView key(kernel_, device_, dtype_);
  auto it = p.by_kernel.find(key);
  if (it == p.by_kernel.end())
    it = p.by_kernel.emplace(KernelKey(kernel_, device_, dtype_), Totals{}).first;
  ++it->second.calls;
  it->second.ns += ns;
}

}  // namespace detail

void set_operator_profiling(bool on) {
  detail::g_operator_profiling.store(on, std::memory_order_relaxed);
}

bool operator_profiling() {
  return detail::operator_profiling_on();
}

std::vector<OperatorTime> operator_profile() {
  std::vector<OperatorTime> rows;
  {
    detail::Profile& p = detail::profile();
    std::lock_guard lock(p.mutex);
    for (const auto& [op, t] : p.by_op)
      rows.push_back(
          {op, t.calls, static_cast<double>(t.ns) * 1e-9, static_cast<double>(t.comm_ns) * 1e-9});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const OperatorTime& a, const OperatorTime& b) {
    return a.seconds > b.seconds;  // the map gave them sorted by name
  });
  return rows;
}

std::vector<KernelTime> kernel_profile() {
  std::vector<KernelTime> rows;
  {
    detail::Profile& p = detail::profile();
    std::lock_guard lock(p.mutex);
    for (const auto& [key, t] : p.by_kernel)
      rows.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), t.calls,
                      static_cast<double>(t.ns) * 1e-9});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const KernelTime& a, const KernelTime& b) {
    return a.seconds > b.seconds;  // the map gave them sorted by key
  });
  return rows;
}

void reset_operator_profile() {
  detail::Profile& p = detail::profile();
  std::lock_guard lock(p.mutex);
  p.by_op.clear();
  p.by_kernel.clear();
}

std::string format_operator_profile(const std::vector<OperatorTime>& rows) {
  std::size_t width = 5;  // "total"
  double seconds = 0, comm = 0;
  std::int64_t calls = 0;
  for (const auto& r : rows) {
    width = std::max(width, r.op.size());
    seconds += r.seconds;
    comm += r.comm_seconds;
    calls += r.calls;
  }
  auto line = [&](std::string_view op, std::int64_t n, double s, double c) {
    return fmt::format("{:<{}}  {:>8}  {:>11.3f}  {:>11.3f}  {:>6.1f}%\n", op, width, n, s * 1e3,
                       c * 1e3, seconds > 0 ? 100 * s / seconds : 0.0);
  };
  std::string out = fmt::format("{:<{}}  {:>8}  {:>11}  {:>11}  {:>7}\n", "op", width, "calls",
                                "ms", "comm ms", "share");
  for (const auto& r : rows)
    out += line(r.op, r.calls, r.seconds, r.comm_seconds);
  return out + line("total", calls, seconds, comm);
}

std::string format_kernel_profile(const std::vector<KernelTime>& rows) {
  std::size_t width = 6;  // "kernel"
  double seconds = 0;
  std::int64_t calls = 0;
  for (const auto& r : rows) {
    width = std::max(width, r.kernel.size());
    seconds += r.seconds;
    calls += r.calls;
  }
  auto line = [&](std::string_view kernel, std::string_view device, std::string_view dtype,
                  std::int64_t n, double s) {
    return fmt::format("{:<{}}  {:<6}  {:<5}  {:>8}  {:>11.3f}  {:>6.1f}%\n", kernel, width, device,
                       dtype, n, s * 1e3, seconds > 0 ? 100 * s / seconds : 0.0);
  };
  std::string out = fmt::format("{:<{}}  {:<6}  {:<5}  {:>8}  {:>11}  {:>7}\n", "kernel", width,
                                "device", "dtype", "calls", "ms", "share");
  for (const auto& r : rows)
    out += line(r.kernel, device_type_name(r.device), dtype_name(r.dtype), r.calls, r.seconds);
  return out + line("total", "", "", calls, seconds);
}

}  // namespace dtensor
