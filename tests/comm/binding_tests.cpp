// Security default: with neither DTENSOR_HOSTNAME nor DTENSOR_IFNAME set, the
// Gloo transport binds to the loopback address only. Gloo closes a pair's
// listening socket once connected, so the test checks the local address of
// every TCP socket the process holds: each was bound to the device address.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

// Inodes of the sockets this process has open.
std::set<std::string> own_socket_inodes() {
  std::set<std::string> inodes;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    char target[256];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<std::size_t>(n));
    if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
  }
  closedir(d);
  return inodes;
}

struct OwnSocket {
  std::string local_address;  // hex, as /proc/net/tcp writes it
  bool ipv6;
};

// This process's TCP sockets, in any state.
std::vector<OwnSocket> own_tcp_sockets() {
  const auto mine = own_socket_inodes();
  std::vector<OwnSocket> out;
  for (const char* file : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (mine.count(inode))
        out.push_back({local.substr(0, local.find(':')), std::string(file).back() == '6'});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("by default the transport binds to loopback only P=2", "[comm][rendezvous]") {
  RunOptions opt;
  opt.env["DTENSOR_HOSTNAME"] = "";
  opt.env["DTENSOR_IFNAME"] = "";
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto sub = ctx.pg->new_subgroup({0, 1});  // a second context, same rule
        const auto sockets = own_tcp_sockets();
        CHECK(!sockets.empty());  // the connections to the peer
        for (const auto& l : sockets) {
          INFO("socket bound to " << l.local_address << (l.ipv6 ? " (IPv6)" : ""));
          // 127.0.0.1 in /proc's little-endian hex; ::1 for IPv6.
          CHECK(l.local_address == (l.ipv6 ? "00000000000000000000000001000000" : "0100007F"));
        }
        sub->barrier();
      },
      opt);
}
