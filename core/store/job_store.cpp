#include "core/store/job_store.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::store_detail {
namespace {

// What a key held that was not the job's, for the timeout's message.
std::string describe(Seal s) {
  switch (s) {
    case Seal::OtherToken:
      return "a value sealed with another job token (a process of another job with the same "
             "job id, or started with a different DTENSOR_JOB_TOKEN)";
    case Seal::Unsealed:
      return "a value without the job token's seal (written by a process that is not part of "
             "this job)";
    case Seal::Foreign:
      return "a value not written by libdtensor";
    default:
      return "";
  }
}

}  // namespace

JobStore::JobStore(std::unique_ptr<KvBackend> backend, std::string key_prefix, JobIdentity job,
                   std::string url, std::string shown, std::chrono::milliseconds timeout)
    : backend_(std::move(backend)),
      prefix_(std::move(key_prefix)),
      job_(std::move(job)),
      url_(std::move(url)),
      shown_(std::move(shown)),
      timeout_(timeout) {}

void JobStore::refuse(const std::string& key) const {
  throw CommError(
      "store",
      fmt::format("{} (job '{}'): rendezvous refused: key '{}' holds a value sealed with this "
                  "job's token (DTENSOR_JOB_TOKEN), and this process has none, so it is not part "
                  "of the job. Start it with the job's launcher (dtensor-run passes the token to "
                  "its ranks), or give it the job's own DTENSOR_JOB_ID and DTENSOR_JOB_TOKEN",
                  shown_, job_.id, key));
}

void JobStore::set(const std::string& key, const std::vector<char>& value) {
  const auto deadline = Clock::now() + timeout_;
  const std::string stored =
      seal(job_.token, job_key(key), std::string_view(value.data(), value.size()));
  // A holder of the token overwrites whatever is there (a stale value, an
  // intruder's); a process without one must not overwrite the job's values.
  if (!backend_->put(prefix_ + key, stored, !job_.token, deadline)) refuse(key);
}

std::vector<char> JobStore::get(const std::string& key) {
  const std::string v = await({key}, Clock::now() + timeout_, timeout_).front();
  return std::vector<char>(v.begin(), v.end());
}

void JobStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  await(keys, Clock::now() + timeout, timeout);
}

void JobStore::note_ignored(const std::string& key, Seal seal) {
  {
    std::lock_guard lock(ignored_mutex_);
    if (!ignored_.emplace(key, seal).second) return;
  }
  log::warn("store {}: ignoring key '{}' of job '{}': it holds {} (logged once)", shown_, key,
            job_.id, describe(seal));
}

bool JobStore::check(const std::vector<std::string>& keys) {
  const auto deadline = Clock::now() + timeout_;
  for (const auto& k : keys) {
    const auto stored = backend_->try_get(prefix_ + k, deadline);
    if (!stored) return false;
    const Seal s = open_sealed(job_.token, job_key(k), *stored).seal;
    if (s == Seal::TokenMissing) refuse(k);
    if (s != Seal::Valid) {  // not the job's value: as if absent
      note_ignored(k, s);
      return false;
    }
  }
  return true;
}

std::vector<std::string> JobStore::await(const std::vector<std::string>& keys,
                                         Clock::time_point deadline,
                                         std::chrono::milliseconds waited_for) {
  std::vector<std::optional<std::string>> found(keys.size());
  std::vector<Seal> ignored(keys.size(), Seal::Valid);
  // Short sleeps first (a peer is usually a few milliseconds behind), then
  // at most 20 ms between polls.
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    bool all = true;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (found[i]) continue;
      const auto stored = backend_->try_get(prefix_ + keys[i], deadline);
      if (stored) {
        Opened o = open_sealed(job_.token, job_key(keys[i]), *stored);
        if (o.seal == Seal::Valid) {
          found[i] = std::move(o.payload);
          continue;
        }
        if (o.seal == Seal::TokenMissing) refuse(keys[i]);
        note_ignored(keys[i], o.seal);
        ignored[i] = o.seal;
      }
      all = false;
    }
    if (all) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      for (std::size_t i = 0; i < keys.size(); ++i)
        if (!found[i]) {
          missing += (missing.empty() ? "'" : ", '") + keys[i] + "'";
          if (ignored[i] != Seal::Valid) missing += " (it holds " + describe(ignored[i]) + ")";
        }
      throw TimeoutError(
          "store", fmt::format("{} (job '{}'): timed out after {:.1f} s waiting for key(s) {}: "
                               "a rank that never arrived, or a job with a different job id",
                               shown_, job_.id, waited_for.count() / 1000.0, missing));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (auto& f : found)
    out.push_back(std::move(*f));
  return out;
}

}  // namespace dtensor::store_detail
