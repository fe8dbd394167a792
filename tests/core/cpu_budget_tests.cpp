// The CPUs a process can count on (core/detail/cpu_budget.h): the cgroup
// files' forms parsed against values worked out by hand, and whole cgroup
// trees (v1 and v2, inside and outside a container) written here and read
// back through their mountinfo and /proc/self/cgroup as the kernel shows
// them.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "core/detail/cpu_budget.h"
#include "tools/launch/process_set.h"

namespace fs = std::filesystem;
using namespace dtensor;

namespace {

// A scratch tree: its own /proc/self files and cgroup mounts.
struct Tree {
  dtensor::launch::TempDir dir{"cpu-budget"};
  fs::path root = dir.path();
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = root / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  cpu_budget::Sources sources() const {
    return {root / "proc/self/cgroup", root / "proc/self/mountinfo", root};
  }
};

}  // namespace

TEST_CASE("cgroup quota and cpuset files parse to CPUs", "[cpu_budget]") {
  using cpu_budget::parse_cpu_max;
  CHECK_FALSE(parse_cpu_max("max 100000\n"));
  CHECK(parse_cpu_max("200000 100000\n") == 2.0);
  CHECK(parse_cpu_max("150000 100000") == 1.5);
  CHECK(parse_cpu_max("50000 200000") == 0.25);
  CHECK_FALSE(parse_cpu_max("0 100000"));
  CHECK_FALSE(parse_cpu_max("200000"));
  CHECK_FALSE(parse_cpu_max("two 100000"));
  CHECK_FALSE(parse_cpu_max(""));

  using cpu_budget::parse_cfs_quota;
  CHECK_FALSE(parse_cfs_quota("-1\n", "100000\n"));
  CHECK(parse_cfs_quota("50000\n", "100000\n") == 0.5);
  CHECK(parse_cfs_quota("400000", "100000") == 4.0);
  CHECK_FALSE(parse_cfs_quota("400000", "0"));
  CHECK_FALSE(parse_cfs_quota("", "100000"));

  using cpu_budget::count_cpu_list;
  CHECK(count_cpu_list("0-3,8,10-11\n") == 7);
  CHECK(count_cpu_list("0") == 1);
  CHECK(count_cpu_list("0-1") == 2);
  CHECK(count_cpu_list("5-5,7") == 2);
  CHECK(count_cpu_list("") == 0);
  CHECK(count_cpu_list("\n") == 0);
  CHECK(count_cpu_list("3-1") == 0);
  CHECK(count_cpu_list("a-b") == 0);
  CHECK(count_cpu_list("0,,2") == 0);
}

TEST_CASE("a budget's own and host CPUs: the quota caps both, rounded down", "[cpu_budget]") {
  struct Case {
    cpu_budget::Budget b;
    long own, host;
  };
  const Case cases[] = {
      {{64, 64, 2.0}, 2, 2},         // a pod limited to 2 CPUs on a 64-core node
      {{64, 64, 2.5}, 2, 2},         // part of a CPU is not a thread's
      {{64, 64, 0.5}, 1, 1},         // at least one
      {{1, 2, std::nullopt}, 1, 2},  // a rank bound to one of two cores
      {{4, 16, 3.0}, 3, 3},          // a quota below both
      {{8, 8, std::nullopt}, 8, 8},  // no limits
      {{2, 0, std::nullopt}, 2, 2},  // no cpuset known: the affinity
      {{0, 0, std::nullopt}, 1, 1},  // nothing known
  };
  for (const Case& c : cases) {
    INFO("affinity " << c.b.affinity << ", cpuset " << c.b.cpuset << ", quota "
                     << (c.b.quota ? std::to_string(*c.b.quota) : "none"));
    CHECK(c.b.own() == c.own);
    CHECK(c.b.host() == c.host);
  }
}

// A cgroup layout as the kernel shows it, and what it limits.
struct Layout {
  std::string what;
  std::string mountinfo, self_cgroup;
  std::map<std::string, std::string> files;
  std::optional<double> quota;
  long cpuset;
};

TEST_CASE("cgroup trees, v1 and v2, read to their quota and cpuset", "[cpu_budget]") {
  const Layout layouts[] = {
      {"v2 inside a container: the namespace's root holds the limits",
       "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
       "30 22 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw,nsdelegate\n",
       "0::/\n",
       {{"sys/fs/cgroup/cpu.max", "200000 100000\n"},
        {"sys/fs/cgroup/cpuset.cpus.effective", "0-3\n"}},
       2.0,
       4},
      // The leaf has no cpuset controller: its parent's effective set applies.
      {"v2 on a host: the lowest quota on the way up counts",
       "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n",
       "0::/kubepods/pod1/c1\n",
       {{"sys/fs/cgroup/kubepods/cpu.max", "800000 100000\n"},
        {"sys/fs/cgroup/kubepods/pod1/cpu.max", "300000 100000\n"},
        {"sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n"},
        {"sys/fs/cgroup/kubepods/pod1/cpuset.cpus.effective", "2-5,9\n"},
        {"sys/fs/cgroup/cpuset.cpus.effective", "0-15\n"}},
       3.0,
       5},
      {"v1, controllers mounted together, the cgroup below the root",
       "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
       "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
       "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
       "40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
       "4:cpu,cpuacct:/docker/abc\n3:cpuset:/docker/abc\n0::/docker/abc\n",
       {{"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n"},
        {"sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n"},
        {"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
        {"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"},
        {"sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "0-1,4\n"}},
       1.5,
       3},
      // Without a cgroup namespace the container sees its cgroup's full path
      // in /proc/self/cgroup, and its mount's root is that cgroup.
      // An older kernel's cpuset without effective_cpus: cpus is the set.
      {"v1 mounted at the container's own cgroup",
       "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu\n"
       "34 31 0:31 /docker/abc /sys/fs/cgroup/cpuset ro - cgroup cgroup rw,cpuset\n",
       "5:cpu:/docker/abc\n3:cpuset:/docker/abc\n",
       {{"sys/fs/cgroup/cpu/cpu.cfs_quota_us", "250000\n"},
        {"sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"},
        {"sys/fs/cgroup/cpuset/cpuset.cpus", "0-2\n"}},
       2.5,
       3},
      // A cgroup that is not under the mount's root (a prefix of its name
      // is not a parent) is not read there.
      {"a cgroup outside the mounted part",
       "34 31 0:31 /docker/ab /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
       "3:cpuset:/docker/abc\n",
       {{"sys/fs/cgroup/cpuset/docker/abc/cpuset.cpus", "0-5\n"},
        {"sys/fs/cgroup/cpuset/c/cpuset.cpus", "0-3\n"},
        {"sys/fs/cgroup/cpuset/cpuset.cpus", "0-1\n"}},
       std::nullopt,
       0},
      {"no cgroup mounted",
       "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n",
       "0::/\n",
       {},
       std::nullopt,
       0},
  };
  for (const Layout& l : layouts) {
    INFO(l.what);
    Tree t;
    t.write("proc/self/mountinfo", l.mountinfo);
    t.write("proc/self/cgroup", l.self_cgroup);
    for (const auto& [path, text] : l.files)
      t.write(path, text);
    const auto b = cpu_budget::read_cgroup_limits(t.sources());
    CHECK(b.quota == l.quota);
    CHECK(b.cpuset == l.cpuset);
  }
  Tree none;  // no /proc files at all
  CHECK_FALSE(cpu_budget::read_cgroup_limits(none.sources()).quota);
}

TEST_CASE("this process's budget counts its CPUs", "[cpu_budget]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const auto b = cpu_budget::read_budget();
  CHECK(b.affinity == CPU_COUNT(&set));
  CHECK(b.cpuset >= 1);
  CHECK(b.own() <= CPU_COUNT(&set));
}
