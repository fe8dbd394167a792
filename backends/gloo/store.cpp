// open_store: the rendezvous stores, built on Gloo's FileStore and RedisStore.
#include <filesystem>
#include <regex>

#include <gloo/rendezvous/file_store.h>
#define HIREDIS_NESTED_INCLUDE
#include <gloo/rendezvous/redis_store.h>

#include "backends/gloo/gloo_errors.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/store.h"

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
  static const std::regex redis_re(
      R"(^redis://([A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):([0-9]{1,5})$)");
  std::smatch m;
  if (url.rfind("redis://", 0) == 0) {
    check_arg(std::regex_match(url, m, redis_re), "store",
              "{}='{}' is not a valid Redis URL (expected redis://HOST:PORT)", what, url);
    const int port = std::stoi(m[2]);
    check_arg(port > 0 && port < 65536, "store", "{}='{}': port {} is out of range", what, url,
              port);
    std::unique_ptr<gloo::rendezvous::Store> s;
    gloo_backend::translate_errors("redis connect", [&] {
      s = std::make_unique<gloo::rendezvous::RedisStore>(m[1].str(), port);
    });
    return std::make_shared<GlooBackedStore>(std::move(s), url, timeout);
  }
  std::string path = url;
  if (url.rfind("file:", 0) == 0) path = url.substr(5);
  check_arg(!path.empty() && path.find("://") == std::string::npos, "store",
            "{}='{}' is not a store URL (expected file:DIR or redis://HOST:PORT)", what, url);
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  check_arg(std::filesystem::is_directory(path), "store",
            "{}='{}': cannot create or use directory '{}'", what, url, path);
  return std::make_shared<GlooBackedStore>(std::make_unique<gloo::rendezvous::FileStore>(path),
                                           "file:" + path, timeout);
}

}  // namespace dtensor
