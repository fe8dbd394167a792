// A thread-safe map from a convolution's identity (CudnnConvPlan::key) to the
// algorithm chosen for it, so cuDNN's heuristics run once per shape.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace dtensor::cuda_backend {

template <typename Value>
class AlgoCache {
 public:
  /// The cached value for `key`, or `choose()`'s result, stored. `choose` runs
  /// outside the lock (it may take milliseconds); if two threads race, the
  /// first stored value wins and both return it.
  template <typename Choose>
  Value get(const std::string& key, Choose&& choose) {
    {
      std::lock_guard lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        ++hits_;
        return it->second;
      }
    }
    Value v = choose();
    std::lock_guard lock(mu_);
    ++misses_;
    return map_.emplace(key, std::move(v)).first->second;
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return map_.size();
  }
  std::uint64_t hits() const {
    std::lock_guard lock(mu_);
    return hits_;
  }
  std::uint64_t misses() const {
    std::lock_guard lock(mu_);
    return misses_;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, Value> map_;
  std::uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace dtensor::cuda_backend
