// dtensor::Store over a KvBackend, for one job: every key lives under the
// job's namespace (Config::job_id), every value carries the job token's seal
// (Config::job_token, seal.h), and every call is bounded by the store's
// timeout. Values that are not the job's (stale ones of a crashed job with
// the same id, an intruder's) are overwritten by set and ignored by wait and
// get; a process without the token that meets the job's sealed values is
// refused (CommError).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/store/kv_backend.h"
#include "core/store/seal.h"
#include "dtensor/core/store.h"

namespace dtensor::store_detail {

struct JobIdentity {
  std::string id = "default";
  std::string source;  // the variable it came from, "" for the default
  std::optional<std::string> token;
};

class JobStore : public Store {
 public:
  /// `key_prefix` is put before every key in the backend ("" when the backend
  /// is already the job's own, e.g. a directory per job); `url` is what
  /// another process needs to reach the store, `shown` the same for messages
  /// (no password).
  JobStore(std::unique_ptr<KvBackend> backend, std::string key_prefix, JobIdentity job,
           std::string url, std::string shown, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  /// One look per key, no waiting; a store that does not answer throws
  /// (the fault monitor must tell a lost store from a missing key).
  bool check(const std::vector<std::string>& keys) override;
  std::string url() const override { return url_; }

 private:
  // Polls until every key holds a valid value or `deadline` passes; returns
  // the payloads in the order of `keys`.
  std::vector<std::string> await(const std::vector<std::string>& keys, Clock::time_point deadline,
                                 std::chrono::milliseconds waited_for);
  std::string job_key(const std::string& key) const { return job_.id + "/" + key; }
  [[noreturn]] void refuse(const std::string& key) const;
  // Logs a key that holds a value not the job's, once per key and kind: the
  // fault monitor looks at its keys ten times a second.
  void note_ignored(const std::string& key, Seal seal);

  std::unique_ptr<KvBackend> backend_;
  std::string prefix_;
  JobIdentity job_;
  std::string url_, shown_;
  std::chrono::milliseconds timeout_;
  std::mutex ignored_mutex_;
  std::set<std::pair<std::string, Seal>> ignored_;  // logged already
};

}  // namespace dtensor::store_detail
