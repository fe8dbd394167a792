// A directory as a store backend: one file per key, written whole under a
// temporary name and renamed into place, so a reader sees a value entirely
// or not at all. For ranks on one host or on a shared file system.
#pragma once

#include <atomic>
#include <string>

#include "core/store/kv_backend.h"

namespace dtensor::store_detail {

class FileKv : public KvBackend {
 public:
  /// Uses (and creates) directory `dir`; `shown` names the store in messages.
  FileKv(std::string dir, std::string shown);

  // Local file operations do not block for long, so they take no deadline;
  // the waiting (JobStore) is what the timeout bounds.
  std::optional<std::string> try_get(const std::string& key, Clock::time_point deadline) override;
  bool put(const std::string& key, const std::string& value, bool keep_sealed,
           Clock::time_point deadline) override;

 private:
  std::string path_of(const std::string& key) const;

  std::string dir_, shown_;
  std::atomic<unsigned> counter_{0};  // temporary names of this process's writes
};

}  // namespace dtensor::store_detail
