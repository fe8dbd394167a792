// Key-value store used for rendezvous. Backends wrap it for their own needs
// (Gloo's rendezvous, NCCL's unique id).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace dtensor {

/// Every call is bounded by the store's timeout (TimeoutError naming the
/// store). Keys live in the job's namespace (Config::job_id) and values carry
/// the job token's seal (Config::job_token): see docs/security.md.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  /// Blocks until `key` exists (or the timeout passes: TimeoutError).
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// Whether every key exists, without waiting (the fault monitor polls
  /// with it). The default waits a millisecond, which some stores round up
  /// to a polling interval: a store that can look at once overrides it.
  virtual bool check(const std::vector<std::string>& keys);
  /// "file:/tmp/dir" or "redis://host:port": what another process needs to
  /// reach this store (with the password of the URL, if any: never log it).
  virtual std::string url() const = 0;
};

/// Opens the store named by `url`: "file:DIR" (or a plain path), or
/// "redis://[USER:PASSWORD@]HOST:PORT" (connected and authenticated within
/// `timeout`; "rediss://" is NotSupported by this build), for the job of
/// config(). Throws InvalidArgument naming `what` (e.g. "DTENSOR_STORE") when
/// malformed, TimeoutError or CommError when the server cannot be reached.
std::shared_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout,
                                  const char* what = "store");

}  // namespace dtensor
