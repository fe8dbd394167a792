#include "core/store/file_kv.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/store/seal.h"
#include "dtensor/core/errors.h"

namespace dtensor::store_detail {
namespace {

// A key as a file name: [A-Za-z0-9_-] and inner dots as they are, the rest
// (the '/' of group prefixes) as %XX; a leading '.' too, so that no key
// collides with the temporary files (".tmp...").
std::string file_name(const std::string& key) {
  std::string out;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (std::isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0))
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace

FileKv::FileKv(std::string dir, std::string shown)
    : dir_(std::move(dir)), shown_(std::move(shown)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  check_arg(std::filesystem::is_directory(dir_), "store", "{}: cannot create or use directory '{}'",
            shown_, dir_);
}

std::string FileKv::path_of(const std::string& key) const {
  const std::string name = file_name(key);
  check_arg(name.size() <= 250, "store", "{}: key '{}' is too long for a file name", shown_, key);
  return dir_ + "/" + name;
}

std::optional<std::string> FileKv::try_get(const std::string& key, Clock::time_point) {
  const std::string path = path_of(key);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw CommError("store",
                    fmt::format("{}: cannot read '{}': {}", shown_, path, strerror(errno)));
  }
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      const int e = errno;
      close(fd);
      if (n < 0)
        throw CommError("store",
                        fmt::format("{}: cannot read '{}': {}", shown_, path, strerror(e)));
      return out;
    }
  }
}

bool FileKv::put(const std::string& key, const std::string& value, bool keep_sealed,
                 Clock::time_point deadline) {
  // Check, then write: not one step as in Redis; a process without the token
  // racing the job's rank for one key is the case it leaves open.
  if (keep_sealed) {
    const auto old = try_get(key, deadline);
    if (old && old->rfind(kSealedMagic, 0) == 0) return false;
  }
  const std::string path = path_of(key);
  const std::string tmp = fmt::format("{}/.tmp.{}.{}", dir_, getpid(), counter_++);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw CommError("store",
                    fmt::format("{}: cannot write '{}': {}", shown_, tmp, strerror(errno)));
  std::size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      close(fd);
      unlink(tmp.c_str());
      throw CommError("store", fmt::format("{}: cannot write '{}': {}", shown_, tmp, strerror(e)));
    }
    done += static_cast<std::size_t>(n);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    throw CommError("store", fmt::format("{}: cannot write '{}': {}", shown_, path, strerror(e)));
  }
  return true;
}

}  // namespace dtensor::store_detail
