#include "dtensor/data/read_npy.h"

#include <cstring>

#include "data/mapped_file.h"
#include "data/npy_header.h"

namespace dtensor::data {

Tensor read_npy(const std::string& path) {
  const MappedFile file(path);
  const NpyHeader h = parse_npy_header(file.bytes(), path);
  check_npy_size(h, file.bytes().size(), path);
  Tensor raw = Tensor::empty(h.shape, npy_carrier(h.element));
  if (raw.nbytes() > 0)
    std::memcpy(raw.data_ptr(), file.bytes().data() + h.data_offset, raw.nbytes());
  return decode_npy(raw, h.element);
}

}  // namespace dtensor::data
