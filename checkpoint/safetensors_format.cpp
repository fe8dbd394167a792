#include "checkpoint/safetensors_format.h"

#include <bit>
#include <nlohmann/json.hpp>

#include "dtensor/core/errors.h"

namespace dtensor::checkpoint {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tensors are written as they lie in memory");

std::string_view safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I64:
      return "I64";
  }
  return "F32";
}

DType parse_safetensors_dtype(std::string_view name, const std::string& what) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I64})
    if (name == safetensors_dtype(t)) return t;
  throw InvalidArgument("checkpoint", fmt::format("{}: dtype '{}' is not one of F32, F64, BF16, "
                                                  "F16, I64",
                                                  what, name));
}

std::int64_t safetensors_item_bytes(const SafetensorsItem& item) {
  return shape_numel(item.shape) * static_cast<std::int64_t>(dtype_size(item.dtype));
}

std::string safetensors_preamble(const std::vector<SafetensorsItem>& items) {
  // ordered_json keeps the items in data order, which is how people read it.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::int64_t at = 0;
  for (const auto& item : items) {
    const std::int64_t bytes = safetensors_item_bytes(item);
    header[item.key] = {{"dtype", safetensors_dtype(item.dtype)},
                        {"shape", item.shape},
                        {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

}  // namespace dtensor::checkpoint
