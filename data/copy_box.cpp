#include "data/copy_box.h"

#include <algorithm>
#include <cstring>

namespace dtensor::data {

void copy_box(std::string_view file, std::uint64_t data_offset, const Shape& global,
              std::size_t element_size, const checkpoint::Box& box, void* dst, LoadStats* stats) {
  if (shape_numel(box.extents) == 0) return;
  const checkpoint::Box whole{Shape(global.size(), 0), global};
  const auto es = static_cast<std::int64_t>(element_size);
  const auto base = static_cast<std::int64_t>(data_offset);
  char* out = static_cast<char*>(dst);
  checkpoint::for_each_run(box, whole, box, [&](std::int64_t s, std::int64_t d, std::int64_t n) {
    const std::int64_t from = base + s * es, bytes = n * es;
    std::memcpy(out + d * es, file.data() + from, static_cast<std::size_t>(bytes));
    if (!stats) return;
    stats->bytes_read += bytes;
    stats->first_byte = stats->first_byte < 0 ? from : std::min(stats->first_byte, from);
    stats->end_byte = std::max(stats->end_byte, from + bytes);
  });
}

}  // namespace dtensor::data
