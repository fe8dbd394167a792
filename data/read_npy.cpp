#include "dtensor/data/read_npy.h"

#include <cstring>
#include <optional>

#include "data/mapped_file.h"
#include "data/npy_header.h"

namespace dtensor::data {

namespace {
Tensor read_as(const std::string& path, std::optional<DType> dtype) {
  const MappedFile file(path);
  const NpyHeader h = parse_npy_header(file.bytes(), path);
  check_npy_size(h, file.bytes().size(), path);
  const DType values = dtype.value_or(npy_values(h.element));
  Tensor raw = Tensor::empty(h.shape, npy_carrier_for(h.element, values, path));
  if (raw.nbytes() > 0)
    std::memcpy(raw.data_ptr(), file.bytes().data() + h.data_offset, raw.nbytes());
  Tensor out = decode_npy_for(raw, h.element, values);
  return out.dtype() == values ? out : out.to(values);
}
}  // namespace

Tensor read_npy(const std::string& path) {
  return read_as(path, std::nullopt);
}

Tensor read_npy(const std::string& path, DType dtype) {
  return read_as(path, dtype);
}

}  // namespace dtensor::data
