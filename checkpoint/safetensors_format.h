// The safetensors layout (the format Hugging Face's `safetensors` package
// reads): an 8-byte little-endian header length N, N bytes of JSON mapping
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data that follows the header), then the raw
// little-endian data, tensors back to back with no holes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"

namespace dtensor::checkpoint {

/// "F32", "F64", "BF16", "F16": safetensors' dtype spellings.
std::string_view safetensors_dtype(DType t);
/// The inverse; InvalidArgument naming `what` for a dtype libdtensor does not have.
DType parse_safetensors_dtype(std::string_view name, const std::string& what);

/// One tensor of a safetensors file, in the order its data is laid out.
struct SafetensorsItem {
  std::string key;
  DType dtype = DType::F32;
  Shape shape;
};

/// The bytes before the data: the length prefix and the JSON header, padded
/// with spaces to a multiple of 8 bytes (so the data is 8-byte aligned), for
/// `items` laid out back to back in the given order.
std::string safetensors_preamble(const std::vector<SafetensorsItem>& items);
/// Bytes of one item's data.
std::int64_t safetensors_item_bytes(const SafetensorsItem& item);

}  // namespace dtensor::checkpoint
