// A whole file mapped read-only: pages are read from disk only where a rank
// touches them, so copying one box out of a huge array reads (about) that
// box and nothing else, and the mapping costs address space, not memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtensor::data {

class MappedFile {
 public:
  /// InvalidArgument naming `path` when it cannot be opened, is not a
  /// regular file or cannot be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace dtensor::data
