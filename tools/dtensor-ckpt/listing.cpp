#include "tools/dtensor-ckpt/listing.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

namespace dtensor::ckpt_cli {

namespace {
std::int64_t tensor_bytes(const CheckpointEntry& e) {
  return shape_numel(e.shape) * static_cast<std::int64_t>(dtype_size(e.dtype));
}
}  // namespace

std::string listing_text(const std::vector<CheckpointEntry>& entries) {
  // Columns padded to their widest cell, so the listing reads as a table.
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : entries)
    rows.push_back({e.name, "shape=" + shape_str(e.shape),
                    "dtype=" + std::string(dtype_name(e.dtype)), "placements=" + e.placements,
                    "mesh=" + shape_str(e.mesh_shape), fmt::format("shards={}", e.shards.size()),
                    fmt::format("bytes={}", tensor_bytes(e))});
  std::vector<std::size_t> width(7, 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c)
      width[c] = std::max(width[c], r[c].size());
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c)
      line += c + 1 < r.size() ? fmt::format("{:<{}}  ", r[c], width[c]) : r[c];
    out += line + "\n";
  }
  return out;
}

std::string listing_json(const std::string& dir, const std::vector<CheckpointEntry>& entries) {
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& e : entries)
    tensors.push_back({{"name", e.name},
                       {"shape", e.shape},
                       {"dtype", dtype_name(e.dtype)},
                       {"placements", e.placements},
                       {"mesh_shape", e.mesh_shape},
                       {"shards", e.shards.size()},
                       {"bytes", tensor_bytes(e)}});
  return nlohmann::ordered_json{{"dir", dir}, {"tensors", tensors}}.dump() + "\n";
}

}  // namespace dtensor::ckpt_cli
