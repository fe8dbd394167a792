// A Redis server as a store backend, over hiredis: connecting, AUTH and every
// command are bounded (hiredis's connect timeout and socket timeouts), so a
// frozen or unreachable server is a TimeoutError naming it, never a hang.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/store/kv_backend.h"
#include "dtensor/core/store_url.h"

struct redisContext;

namespace dtensor::store_detail {

class RedisKv : public KvBackend {
 public:
  /// Connects (and authenticates) now, within `timeout`; `shown` names the
  /// server in messages (the URL without its password). TLS (rediss://) is
  /// NotSupported: Debian's hiredis 0.14 has no TLS.
  RedisKv(const StoreUrl& url, std::string shown, std::chrono::milliseconds timeout);
  ~RedisKv() override;

  std::optional<std::string> try_get(const std::string& key, Clock::time_point deadline) override;
  bool put(const std::string& key, const std::string& value, bool keep_sealed,
           Clock::time_point deadline) override;

 private:
  struct Reply;
  // Sends one command (binary-safe arguments) and returns its reply; a lost
  // connection is made again first. Holds the mutex: one command at a time.
  Reply command(const std::vector<std::string>& args, Clock::time_point deadline);
  // The same on the current connection, without making one; the reply may be an error.
  Reply send(const std::vector<std::string>& args, Clock::time_point deadline);
  void connect(Clock::time_point deadline);
  void drop_connection();

  StoreUrl url_;
  std::string shown_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  redisContext* ctx_ = nullptr;
};

}  // namespace dtensor::store_detail
