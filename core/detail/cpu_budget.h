// The CPUs a process can count on. Three things bound them, and containers
// set the last two while leaving the machine's count of online CPUs as it is:
//   - the CPUs it may run on (sched_getaffinity: taskset, a launcher's
//     binding, a container's cpuset);
//   - its cgroup's cpuset, which binding one rank inside it does not narrow:
//     what all the ranks of a job on this host share;
//   - its cgroup's CPU bandwidth quota (cgroup v2 `cpu.max`, v1
//     `cpu.cfs_quota_us` / `cpu.cfs_period_us`: `docker --cpus`, a
//     Kubernetes CPU limit), the lowest on the way up to the hierarchy's root.
// A pod limited to 2 CPUs on a 64-core node sees 64 CPUs online and may run
// on all 64, but gets 2 CPUs' worth of time: 64 OpenMP threads, or ranks
// spinning on cores they do not have, are throttled there.
//
// Header-only and internal (not installed: POSIX headers): the library and
// dtensor-run, which does not link it, include it from the source tree.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/detail/trim_spaces.h"
#include "core/detail/whole_integer.h"

namespace dtensor::cpu_budget {

struct Budget {
  long affinity = 0;            ///< CPUs this process may run on; 0: unknown
  long cpuset = 0;              ///< CPUs of its cgroup (else online); 0: unknown
  std::optional<double> quota;  ///< the CPU quota in CPUs; nullopt: none

  /// The CPUs this process's own threads can use at once: the fewer of its
  /// affinity and the quota (rounded down), at least 1.
  long own() const { return capped(affinity); }
  /// The CPUs the ranks of this host share: the cgroup's (a binding of one
  /// rank does not narrow it) capped by the quota, at least 1.
  long host() const { return capped(cpuset > 0 ? cpuset : affinity); }

 private:
  long capped(long cpus) const {
    long n = cpus > 0 ? cpus : 1;
    if (quota) n = std::min(n, static_cast<long>(std::floor(*quota)));
    return std::max(1L, n);
  }
};

namespace detail {

// A number in a cgroup file, its line end and spaces aside.
inline std::optional<std::int64_t> to_int(std::string_view s) {
  return dtensor::detail::whole_integer(dtensor::detail::trim_spaces(s));
}

inline std::optional<std::string> read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t at = 0;;) {
    const auto next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string_view::npos ? next : next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

}  // namespace detail

/// A cgroup v2 `cpu.max` ("QUOTA PERIOD" in microseconds, QUOTA "max" for
/// none) in CPUs; nullopt: no quota, or not that form.
inline std::optional<double> parse_cpu_max(std::string_view text) {
  const auto fields = detail::split(dtensor::detail::trim_spaces(text), ' ');
  if (fields.size() != 2 || fields[0] == "max") return std::nullopt;
  const auto quota = detail::to_int(fields[0]), period = detail::to_int(fields[1]);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

/// A cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` in CPUs; nullopt:
/// no quota (-1) or unreadable.
inline std::optional<double> parse_cfs_quota(std::string_view quota_us,
                                             std::string_view period_us) {
  const auto quota = detail::to_int(quota_us), period = detail::to_int(period_us);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

/// The CPUs of a list such as "0-3,8,10-11" (a cpuset file's form); 0 when
/// it is empty or not that form.
inline long count_cpu_list(std::string_view text) {
  text = dtensor::detail::trim_spaces(text);
  if (text.empty()) return 0;
  long n = 0;
  for (std::string_view item : detail::split(text, ',')) {
    const auto dash = item.find('-');
    const auto lo = detail::to_int(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : detail::to_int(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo) return 0;
    n += static_cast<long>(*hi - *lo + 1);
  }
  return n;
}

/// Where the cgroup files are read from: the real ones by default; a test
/// points them at a tree it wrote (`root` is put before every mount point).
struct Sources {
  std::filesystem::path self_cgroup = "/proc/self/cgroup";
  std::filesystem::path mountinfo = "/proc/self/mountinfo";
  std::filesystem::path root = "/";
};

namespace detail {

// A mounted cgroup hierarchy: where it is mounted and which cgroup is its
// root (not "/" inside a container without a cgroup namespace).
struct Mount {
  std::string root, point;
};

// Mountinfo's fields: ID PARENT DEV ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE
// SOURCE SUPEROPTIONS. The v1 hierarchies by controller ("cpu", "cpuset"),
// v2's under "".
inline std::map<std::string, Mount> cgroup_mounts(const std::string& mountinfo) {
  std::map<std::string, Mount> out;
  std::istringstream lines(mountinfo);
  for (std::string line; std::getline(lines, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, options;
    if (!(left >> id >> parent >> dev >> root >> point) || !(right >> fstype >> source >> options))
      continue;
    if (fstype == "cgroup2") {
      out.try_emplace("", Mount{root, point});
    } else if (fstype == "cgroup") {
      for (std::string_view opt : split(options, ','))
        if (opt == "cpu" || opt == "cpuset") out.try_emplace(std::string(opt), Mount{root, point});
    }
  }
  return out;
}

// /proc/self/cgroup's lines: ID:CONTROLLERS:PATH; v2's has no controllers.
inline std::map<std::string, std::string> cgroup_paths(const std::string& self_cgroup) {
  std::map<std::string, std::string> out;
  std::istringstream lines(self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string path = line.substr(b + 1);
    const std::string_view controllers = std::string_view(line).substr(a + 1, b - a - 1);
    if (controllers.empty()) out.try_emplace("", path);
    for (std::string_view c : split(controllers, ','))
      if (c == "cpu" || c == "cpuset") out.try_emplace(std::string(c), path);
  }
  return out;
}

// The directories of this process's cgroup in `key`'s hierarchy, from its
// own up to the mount's root; none when it is not mounted here.
inline std::vector<std::filesystem::path> cgroup_dirs(
    const Sources& src, const std::map<std::string, Mount>& mounts,
    const std::map<std::string, std::string>& paths, const std::string& key) {
  const auto m = mounts.find(key);
  const auto p = paths.find(key);
  if (m == mounts.end() || p == paths.end()) return {};
  std::string rel = p->second;
  // Under a mount of a cgroup other than the root, paths are relative to it.
  // A cgroup outside the mounted part is not to be read here.
  const std::string& root = m->second.root;
  if (root != "/") {
    if (rel.rfind(root, 0) != 0 || (rel.size() > root.size() && rel[root.size()] != '/')) return {};
    rel = rel.substr(root.size());
  }
  const std::filesystem::path top =
      src.root / std::filesystem::path(m->second.point).relative_path();
  std::filesystem::path dir = top / std::filesystem::path(rel).relative_path();
  std::vector<std::filesystem::path> out;
  for (;;) {
    out.push_back(dir);
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
    if (dir.native().size() < top.native().size()) break;
  }
  return out;
}

inline void take_lower(std::optional<double>& have, std::optional<double> q) {
  if (q && (!have || *q < *have)) have = q;
}

}  // namespace detail

/// The quota and the cpuset of this process's cgroups, as `src` gives them;
/// affinity left 0 (read_budget() adds it).
inline Budget read_cgroup_limits(const Sources& src = {}) {
  Budget b;
  const auto mountinfo = detail::read_text(src.mountinfo);
  const auto self = detail::read_text(src.self_cgroup);
  if (!mountinfo || !self) return b;
  const auto mounts = detail::cgroup_mounts(*mountinfo);
  const auto paths = detail::cgroup_paths(*self);
  for (const auto& dir : detail::cgroup_dirs(src, mounts, paths, "")) {
    if (const auto t = detail::read_text(dir / "cpu.max"))
      detail::take_lower(b.quota, parse_cpu_max(*t));
    if (b.cpuset == 0)
      if (const auto t = detail::read_text(dir / "cpuset.cpus.effective"))
        b.cpuset = count_cpu_list(*t);
  }
  for (const auto& dir : detail::cgroup_dirs(src, mounts, paths, "cpu")) {
    const auto quota = detail::read_text(dir / "cpu.cfs_quota_us");
    const auto period = detail::read_text(dir / "cpu.cfs_period_us");
    if (quota && period) detail::take_lower(b.quota, parse_cfs_quota(*quota, *period));
  }
  if (b.cpuset == 0)
    for (const auto& dir : detail::cgroup_dirs(src, mounts, paths, "cpuset")) {
      // Kernels before 4.17 have no effective_cpus; cpus is then the set.
      for (const char* file : {"cpuset.effective_cpus", "cpuset.cpus"})
        if (const auto t = detail::read_text(dir / file); t && b.cpuset == 0)
          b.cpuset = count_cpu_list(*t);
      if (b.cpuset != 0) break;
    }
  return b;
}

/// This process's budget: its affinity, its cgroups' cpuset (else the
/// online CPUs) and quota.
inline Budget read_budget() {
  Budget b = read_cgroup_limits();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) b.affinity = CPU_COUNT(&set);
  if (b.cpuset == 0) b.cpuset = sysconf(_SC_NPROCESSORS_ONLN);
  return b;
}

}  // namespace dtensor::cpu_budget
