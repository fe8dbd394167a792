#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "dtensor/core/errors.h"

namespace dtensor::checkpoint {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error("checkpoint", fmt::format("{} '{}': {}", what, path, std::strerror(errno)));
}

}  // namespace

DurableWriter::DurableWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", tmp_);
}

DurableWriter::~DurableWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void DurableWriter::write(const void* data, std::int64_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, static_cast<std::size_t>(bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", tmp_);
    p += n;
    bytes -= n;
    written_ += n;
  }
}

void DurableWriter::commit() {
  if (::fsync(fd_) != 0) fail("cannot fsync", tmp_);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("cannot close", tmp_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp_.c_str());
    errno = saved;
    fail("cannot rename into place", path_);
  }
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory", dir);
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (rc != 0) fail("cannot fsync directory", dir);
}

FileReader::FileReader(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // forever; it changes nothing for a regular file, the only kind accepted.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail("cannot open", path);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    fail("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error("checkpoint", fmt::format("'{}' is not a regular file", path));
  }
  size_ = st.st_size;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::int64_t FileReader::read_at(std::int64_t offset, void* dst, std::int64_t bytes) const {
  auto* p = static_cast<char*>(dst);
  std::int64_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd_, p + got, static_cast<std::size_t>(bytes - got), offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read", path_);
    if (n == 0) break;  // end of file
    got += n;
  }
  return got;
}

}  // namespace dtensor::checkpoint
