// A real redis-server on 127.0.0.1 for the store tests, without persistence;
// stopped (SIGTERM, then SIGKILL) when the object goes away. Also a "frozen"
// server: a port that accepts connections and never answers.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tools/launch/process_set.h"

namespace dtensor::testing {

// A port nobody listens on right now (the kernel picks it).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

inline bool accepts_connections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

class RedisServer {
 public:
  /// `extra`: more redis-server arguments, e.g. {"--requirepass", "secret"}.
  explicit RedisServer(const std::vector<std::string>& extra = {})
      : dir_("dtensor-redis"), port_(free_port()) {
    using namespace std::chrono_literals;
    launch::ProcessSpec spec;
    spec.argv = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                 "--save",       "",       "--appendonly",        "no",     "--dir",
                 dir_.path()};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.output_file = dir_.path() + "/redis.log";
    procs_.start(spec);
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!accepts_connections(port_)) {
      procs_.poll(20ms);
      REQUIRE(!procs_.status(0).exited);
      REQUIRE(std::chrono::steady_clock::now() < until);
    }
  }
  ~RedisServer() { procs_.stop_all(std::chrono::milliseconds(2000)); }
  int port() const { return port_; }
  /// E.g. SIGSTOP to freeze the server, SIGCONT to let it go on.
  void signal(int sig) { procs_.signal_all(sig); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return procs_.pid(0); }

 private:
  launch::TempDir dir_;
  int port_;
  launch::ProcessSet procs_;
};

/// A TCP port on 127.0.0.1 that accepts connections (the kernel completes
/// them into the backlog) and never reads or answers: a frozen server.
class FrozenServer {
 public:
  FrozenServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~FrozenServer() { close(fd_); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace dtensor::testing
