#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dtensor/core/errors.h"

namespace dtensor::data {

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DTENSOR_CHECK_ARG(fd >= 0, "data", "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular) ::close(fd);
  // A directory's or a FIFO's "size" is no length to map.
  check_arg(regular, "data", "{}: not a regular file", path);
  size_ = static_cast<std::size_t>(st.st_size);
  void* p = size_ == 0 ? nullptr : ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file
  DTENSOR_CHECK_ARG(p != MAP_FAILED, "data", "{}: cannot map its {} bytes: {}", path, size_,
                    std::strerror(mmap_errno));
  data_ = static_cast<const char*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

}  // namespace dtensor::data
