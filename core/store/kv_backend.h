// What a store keeps its values in (a Redis server, a directory): raw keys
// and bytes, every call bounded by a deadline. JobStore (job_store.h) adds the
// job's namespace, the token's seal and the waiting on top.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace dtensor::store_detail {

using Clock = std::chrono::steady_clock;

class KvBackend {
 public:
  virtual ~KvBackend() = default;
  /// The value of `key`, or nullopt when it has none. TimeoutError when the
  /// backend does not answer by `deadline`; CommError when it fails.
  virtual std::optional<std::string> try_get(const std::string& key,
                                             Clock::time_point deadline) = 0;
  /// Sets `key`. With `keep_sealed`, a value already there that starts with
  /// "DTS1" (a sealed one: seal.h) is kept and false returned; the check and
  /// the write are one step where the backend allows (Redis).
  virtual bool put(const std::string& key, const std::string& value, bool keep_sealed,
                   Clock::time_point deadline) = 0;
};

}  // namespace dtensor::store_detail
