// open_store: the rendezvous stores, built on Gloo's FileStore and RedisStore.
#include <filesystem>
#include <functional>

#include <gloo/rendezvous/file_store.h>
#define HIREDIS_NESTED_INCLUDE
#include <gloo/rendezvous/redis_store.h>

#include "backends/gloo/gloo_errors.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/store.h"
#include "dtensor/core/store_url.h"

namespace dtensor {
namespace {

// Gloo's file store can look for keys without waiting, but keeps it to itself.
class CheckingFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::check;
  using FileStore::FileStore;
};

// Adapts a Gloo store to dtensor::Store; Gloo's exceptions become CommError/TimeoutError.
class GlooBackedStore : public Store {
 public:
  using Checker = std::function<bool(const std::vector<std::string>&)>;
  GlooBackedStore(std::unique_ptr<gloo::rendezvous::Store> s, std::string url,
                  std::chrono::milliseconds timeout, Checker checker)
      : store_(std::move(s)), url_(std::move(url)), timeout_(timeout), check_(std::move(checker)) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    gloo_backend::translate_errors("store set", [&] { store_->set(key, value); });
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    std::vector<char> out;
    gloo_backend::translate_errors("store get", [&] { out = store_->get(key); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    gloo_backend::translate_errors("store wait", [&] { store_->wait(keys, timeout); });
  }
  bool check(const std::vector<std::string>& keys) override {
    bool found = false;
    gloo_backend::translate_errors("store check", [&] { found = check_(keys); });
    return found;
  }
  std::string url() const override { return url_; }
  gloo::rendezvous::Store& gloo_store() { return *store_; }

 private:
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::string url_;
  std::chrono::milliseconds timeout_;
  Checker check_;
};

}  // namespace

std::shared_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout,
                                  const char* what) {
  const StoreUrl u = parse_store_url(url);
  switch (u.problem) {
    case StoreUrl::Problem::BadRedis:
      throw InvalidArgument("store", fmt::format("{}='{}' is not a valid Redis URL (expected "
                                                 "redis://HOST:PORT)",
                                                 what, url));
    case StoreUrl::Problem::BadPort:
      throw InvalidArgument("store",
                            fmt::format("{}='{}': port {} is out of range", what, url, u.port));
    case StoreUrl::Problem::NoDirectory:
      throw InvalidArgument("store", fmt::format("{}='{}' is not a store URL (expected file:DIR "
                                                 "or redis://HOST:PORT)",
                                                 what, url));
    case StoreUrl::Problem::None:
      break;
  }
  if (u.kind == StoreUrl::Kind::Redis) {
    std::unique_ptr<gloo::rendezvous::RedisStore> s;
    gloo_backend::translate_errors("redis connect", [&] {
      s = std::make_unique<gloo::rendezvous::RedisStore>(u.host, u.port);
    });
    auto* redis = s.get();
    return std::make_shared<GlooBackedStore>(
        std::move(s), url, timeout, [redis](const auto& keys) { return redis->check(keys); });
  }
  const std::string& path = u.path;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  check_arg(std::filesystem::is_directory(path), "store",
            "{}='{}': cannot create or use directory '{}'", what, url, path);
  auto file = std::make_unique<CheckingFileStore>(path);
  auto* files = file.get();
  return std::make_shared<GlooBackedStore>(
      std::move(file), "file:" + path, timeout,
      [files](const auto& keys) { return files->check(keys); });
}

}  // namespace dtensor
