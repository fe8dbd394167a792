// Gloo's rendezvous needs a gloo::rendezvous::Store; this one forwards to a
// dtensor::Store under a key prefix, so that each group (the world, every
// subgroup) rendezvouses in its own namespace of the one job-wide store.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "dtensor/core/store.h"

namespace dtensor::gloo_backend {

class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  /// `timeout` bounds every wait, including Gloo's calls that pass none (its
  /// default of 30 s would otherwise override the group's timeout).
  StoreAdapter(std::shared_ptr<dtensor::Store> store, std::string prefix,
               std::chrono::milliseconds timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(full_key(key), data);
  }
  std::vector<char> get(const std::string& key) override {
    store_->wait({full_key(key)}, timeout_);
    return store_->get(full_key(key));
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    // Never shorter than the group's timeout: the rendezvous gives Gloo's
    // context a fifth of it (see GlooProcessGroup::connect), which Gloo also
    // passes here, but waiting for a peer's address deserves the whole.
    const std::chrono::milliseconds bound = std::max(timeout, timeout_);
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys)
      full.push_back(full_key(k));
    store_->wait(full, bound);
  }

 private:
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }

  std::shared_ptr<dtensor::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace dtensor::gloo_backend
