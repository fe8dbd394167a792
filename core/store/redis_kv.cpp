#include "core/store/redis_kv.h"

#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include "dtensor/core/errors.h"

namespace dtensor::store_detail {
namespace {

using std::chrono::milliseconds;

// The time a step may take: what is left before `deadline`, at least 50 ms
// (a step must be able to finish at all) and at most the store's timeout.
timeval budget(Clock::time_point deadline, milliseconds timeout) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  left = std::clamp(left, milliseconds(50), std::max(timeout, milliseconds(50)));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(left.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((left.count() % 1000) * 1000);
  return tv;
}

double seconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

// hiredis reports a socket timeout as an I/O error with EAGAIN (blocking
// socket with SO_RCVTIMEO) or as "Connection timed out" (connect).
bool is_timeout(const redisContext* c, int saved_errno) {
#ifdef REDIS_ERR_TIMEOUT  // hiredis >= 1.0
  if (c->err == REDIS_ERR_TIMEOUT) return true;
#endif
  if (c->err != REDIS_ERR_IO) return false;
  return saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT ||
         std::strstr(c->errstr, "temporarily unavailable") != nullptr ||
         std::strstr(c->errstr, "timed out") != nullptr;
}

// Atomically: keep a sealed value ("DTS1..."), else set. 1 when set.
constexpr const char* kSetUnlessSealed =
    "local v = redis.call('GET', KEYS[1]) "
    "if v and string.sub(v, 1, 4) == 'DTS1' then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1]) return 1";

}  // namespace

struct RedisKv::Reply {
  int type = 0;
  long long integer = 0;
  std::string str;
};

RedisKv::RedisKv(const StoreUrl& url, std::string shown, milliseconds timeout)
    : url_(url), shown_(std::move(shown)), timeout_(timeout) {
  if (url_.tls)
    throw NotSupported("store",
                       fmt::format("{}: TLS to Redis (rediss://) is not supported: this build's "
                                   "hiredis ({}.{}) has no TLS. Use redis:// on a trusted "
                                   "network, or a TLS tunnel (e.g. stunnel) to the server",
                                   shown_, HIREDIS_MAJOR, HIREDIS_MINOR));
  std::lock_guard lock(mutex_);
  connect(Clock::now() + timeout_);
}

RedisKv::~RedisKv() {
  drop_connection();
}

void RedisKv::drop_connection() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

void RedisKv::connect(Clock::time_point deadline) {
  const timeval tv = budget(deadline, timeout_);
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  const int saved_errno = errno;
  if (!ctx_) throw CommError("store", fmt::format("{}: cannot allocate a Redis context", shown_));
  if (ctx_->err) {
    const std::string why = ctx_->errstr;
    const bool timed_out = is_timeout(ctx_, saved_errno);
    drop_connection();
    if (timed_out)
      throw TimeoutError(
          "store", fmt::format("{}: no connection within {:.1f} s ({})", shown_, seconds(tv), why));
    throw CommError("store",
                    fmt::format("{}: cannot connect to the Redis server: {}", shown_, why));
  }
  if (url_.password.empty()) return;
  // AUTH [user] password: Redis 6 ACL users, or the default user's password.
  std::vector<std::string> auth{"AUTH"};
  if (!url_.user.empty()) auth.push_back(url_.user);
  auth.push_back(url_.password);
  const Reply r = send(auth, deadline);
  if (r.type == REDIS_REPLY_ERROR) {
    drop_connection();
    throw CommError("store",
                    fmt::format("{}: the Redis server refused the credentials of the store URL "
                                "({}); check the user and password in "
                                "redis://USER:PASSWORD@HOST:PORT",
                                shown_, r.str));
  }
}

RedisKv::Reply RedisKv::send(const std::vector<std::string>& args, Clock::time_point deadline) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  const timeval tv = budget(deadline, timeout_);
  redisSetTimeout(ctx_, tv);
  auto* raw = static_cast<redisReply*>(
      redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
  const int saved_errno = errno;
  if (!raw) {
    // The connection is unusable now (a late reply would answer the next
    // command): dropped, and made again by the next command.
    const std::string why = ctx_->errstr;
    const bool timed_out = is_timeout(ctx_, saved_errno);
    drop_connection();
    if (timed_out)
      throw TimeoutError("store", fmt::format("{}: no reply to {} within {:.1f} s (is the Redis "
                                              "server frozen or overloaded?)",
                                              shown_, args[0], seconds(tv)));
    throw CommError("store", fmt::format("{}: {} failed: {}", shown_, args[0], why));
  }
  Reply r{raw->type, raw->integer, std::string(raw->str ? raw->str : "", raw->str ? raw->len : 0)};
  freeReplyObject(raw);
  return r;
}

RedisKv::Reply RedisKv::command(const std::vector<std::string>& args, Clock::time_point deadline) {
  std::lock_guard lock(mutex_);
  if (!ctx_) connect(deadline);
  Reply r = send(args, deadline);
  if (r.type == REDIS_REPLY_ERROR) {
    if (r.str.rfind("NOAUTH", 0) == 0)
      throw CommError("store", fmt::format("{}: the Redis server requires a password ({}): give "
                                           "it in the store URL, redis://:PASSWORD@HOST:PORT or "
                                           "redis://USER:PASSWORD@HOST:PORT",
                                           shown_, r.str));
    throw CommError("store", fmt::format("{}: {} failed: {}", shown_, args[0], r.str));
  }
  return r;
}

std::optional<std::string> RedisKv::try_get(const std::string& key, Clock::time_point deadline) {
  Reply r = command({"GET", key}, deadline);
  if (r.type == REDIS_REPLY_NIL) return std::nullopt;
  return std::move(r.str);
}

bool RedisKv::put(const std::string& key, const std::string& value, bool keep_sealed,
                  Clock::time_point deadline) {
  if (!keep_sealed) {
    command({"SET", key, value}, deadline);
    return true;
  }
  return command({"EVAL", kSetUnlessSealed, "1", key, value}, deadline).integer == 1;
}

}  // namespace dtensor::store_detail
