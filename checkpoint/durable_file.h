// Files that survive a crash: written under a temporary name, fsync'ed, then
// renamed into place and the directory fsync'ed, so a reader sees either the
// old file or the whole new one. And positional reads (pread) of byte ranges.
#pragma once

#include <cstdint>
#include <string>

namespace dtensor::checkpoint {

/// Writes `path` through `path + ".tmp"`. commit() makes it durable and
/// visible; destroyed without commit(), the temporary file is removed.
class DurableWriter {
 public:
  explicit DurableWriter(std::string path);
  ~DurableWriter();
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;

  void write(const void* data, std::int64_t bytes);
  std::int64_t bytes_written() const { return written_; }
  /// fsync, close, rename to the final name (not yet the directory: see fsync_directory).
  void commit();
  const std::string& temporary_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  std::int64_t written_ = 0;
};

/// Makes the directory's entries (renames, new files) durable.
void fsync_directory(const std::string& dir);

/// A file opened for positional reads.
class FileReader {
 public:
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  std::int64_t size() const { return size_; }
  /// Reads up to `bytes` at `offset`; returns how many were read (fewer only at end of file).
  std::int64_t read_at(std::int64_t offset, void* dst, std::int64_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

}  // namespace dtensor::checkpoint
