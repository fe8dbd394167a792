// open_store: a store URL to a JobStore over the right backend, in the job's
// namespace (Config::job_id) with its token (Config::job_token).
#include <filesystem>

#include <fmt/format.h>

#include "core/store/file_kv.h"
#include "core/store/job_store.h"
#include "core/store/redis_kv.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/store.h"
#include "dtensor/core/store_url.h"

namespace dtensor {

std::shared_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout,
                                  const char* what) {
  const StoreUrl u = parse_store_url(url);
  const std::string shown = redact_store_url(url);
  switch (u.problem) {
    case StoreUrl::Problem::BadRedis:
      throw InvalidArgument("store", fmt::format("{}='{}' is not a valid Redis URL (expected "
                                                 "redis://[USER:PASSWORD@]HOST:PORT)",
                                                 what, shown));
    case StoreUrl::Problem::BadCredentials:
      throw InvalidArgument("store", fmt::format("{}='{}': the credentials before '@' must be "
                                                 "USER:PASSWORD or :PASSWORD, percent-encoded",
                                                 what, shown));
    case StoreUrl::Problem::BadPort:
      throw InvalidArgument("store",
                            fmt::format("{}='{}': port {} is out of range", what, shown, u.port));
    case StoreUrl::Problem::NoDirectory:
      throw InvalidArgument("store", fmt::format("{}='{}' is not a store URL (expected file:DIR "
                                                 "or redis://HOST:PORT)",
                                                 what, shown));
    case StoreUrl::Problem::None:
      break;
  }
  check_arg(timeout.count() > 0, "store", "{}: the timeout must be positive", what);
  const Config& cfg = config();
  store_detail::JobIdentity job{cfg.job_id, cfg.job_id_source, cfg.job_token};
  if (u.kind == StoreUrl::Kind::Redis) {
    auto kv = std::make_unique<store_detail::RedisKv>(u, shown, timeout);
    const std::string prefix = "dtensor/" + job.id + "/";
    return std::make_shared<store_detail::JobStore>(std::move(kv), prefix, std::move(job), url,
                                                    shown, timeout);
  }
  std::error_code ec;
  std::filesystem::create_directories(u.path, ec);
  check_arg(std::filesystem::is_directory(u.path), "store",
            "{}='{}': cannot create or use directory '{}'", what, url, u.path);
  // One directory per job under the store's: `rm -r DIR/JOB` removes a job's keys.
  const std::string store_url = "file:" + u.path;
  auto kv = std::make_unique<store_detail::FileKv>(u.path + "/" + job.id, store_url);
  return std::make_shared<store_detail::JobStore>(std::move(kv), "", std::move(job), store_url,
                                                  store_url, timeout);
}

}  // namespace dtensor
