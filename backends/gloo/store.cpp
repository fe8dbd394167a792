// open_store: the rendezvous stores, built on Gloo's FileStore and RedisStore.
#include <filesystem>

#include <gloo/rendezvous/file_store.h>
#define HIREDIS_NESTED_INCLUDE
#include <gloo/rendezvous/redis_store.h>

#include "backends/gloo/gloo_errors.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/store.h"
#include "dtensor/core/store_url.h"

namespace dtensor {
namespace {

// Adapts a Gloo store to dtensor::Store; Gloo's exceptions become CommError/TimeoutError.
class GlooBackedStore : public Store {
 public:
  GlooBackedStore(std::unique_ptr<gloo::rendezvous::Store> s, std::string url,
                  std::chrono::milliseconds timeout)
      : store_(std::move(s)), url_(std::move(url)), timeout_(timeout) {}

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
  std::string url() const override { return url_; }
  gloo::rendezvous::Store& gloo_store() { return *store_; }

 private:
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::string url_;
  std::chrono::milliseconds timeout_;
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
    std::unique_ptr<gloo::rendezvous::Store> s;
    gloo_backend::translate_errors("redis connect", [&] {
      s = std::make_unique<gloo::rendezvous::RedisStore>(u.host, u.port);
    });
    return std::make_shared<GlooBackedStore>(std::move(s), url, timeout);
  }
  const std::string& path = u.path;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  check_arg(std::filesystem::is_directory(path), "store",
            "{}='{}': cannot create or use directory '{}'", what, url, path);
  return std::make_shared<GlooBackedStore>(std::make_unique<gloo::rendezvous::FileStore>(path),
                                           "file:" + path, timeout);
}

}  // namespace dtensor
