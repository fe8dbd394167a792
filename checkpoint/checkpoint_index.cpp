#include "checkpoint/checkpoint_index.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "checkpoint/block_checksum.h"
#include "checkpoint/box.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors_format.h"

namespace dtensor::checkpoint {

namespace {

using nlohmann::ordered_json;

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
  throw CheckpointCorrupt("checkpoint", fmt::format("index '{}' is malformed: {}", path, why));
}

CheckpointShard decode_shard(const ordered_json& j) {
  CheckpointShard s;
  s.offsets = j.at("offsets").get<Shape>();
  s.extents = j.at("extents").get<Shape>();
  s.file = j.at("file").get<std::string>();
  s.byte_offset = j.at("byte_offset").get<std::int64_t>();
  s.byte_length = j.at("byte_length").get<std::int64_t>();
  s.crc32 = j.at("crc32").get<std::vector<std::uint32_t>>();
  return s;
}

// A file the index names is opened relative to the checkpoint directory, so
// its name must stay there: a path ("../x", "/etc/passwd", "a/b") would make
// loading read whatever file the index points at.
void check_file_name(const std::string& name, const std::string& path) {
  if (!name.empty() && name != "." && name != ".." &&
      name.find_first_of(std::string("/\0", 2)) == std::string::npos)
    return;
  std::string shown;  // a NUL would end the message early
  for (char c : name)
    shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  malformed(path, fmt::format("file '{}' is not a plain file name inside the checkpoint directory",
                              shown));
}

// Shards that overlap would both be read into the same elements, and then,
// with the element count unchanged, leave a gap that nothing fills: loading
// would return stale or zero values without an error. Together with every
// shard inside the shape and the element count equal to the tensor's, no two
// shards overlapping means that they tile the tensor exactly. Sorted by their
// first offset, a shard can only meet the ones that start before it ends in
// dim 0 (for row-sharded tensors: its neighbour), so this is close to linear.
void check_disjoint(const CheckpointEntry& e, const std::string& path) {
  if (e.shape.empty()) return;  // a 0-d tensor: the element count decides
  std::vector<const CheckpointShard*> by_start;
  for (const auto& s : e.shards)
    if (shape_numel(s.extents) > 0) by_start.push_back(&s);
  std::sort(by_start.begin(), by_start.end(),
            [](const CheckpointShard* a, const CheckpointShard* b) {
              return a->offsets[0] < b->offsets[0];
            });
  for (std::size_t i = 0; i < by_start.size(); ++i) {
    const CheckpointShard& a = *by_start[i];
    for (std::size_t j = i + 1;
         j < by_start.size() && by_start[j]->offsets[0] < a.offsets[0] + a.extents[0]; ++j) {
      const CheckpointShard& b = *by_start[j];
      if (auto common = intersect(Box{a.offsets, a.extents}, Box{b.offsets, b.extents}))
        malformed(path, fmt::format("tensor '{}': the shards at {} and at {} overlap in {} "
                                    "elements at {}, so they do not tile the shape {}",
                                    e.name, shape_str(a.offsets), shape_str(b.offsets),
                                    shape_numel(common->extents), shape_str(common->offsets),
                                    shape_str(e.shape)));
    }
  }
}

// Everything loading relies on: a shard lies inside its tensor, its bytes
// match its extents, its checksums cover them, its file is listed and long enough.
void check_entry(const CheckpointEntry& e, const CheckpointIndex& index, const std::string& path) {
  const auto what = [&](const std::string& why) {
    malformed(path, fmt::format("tensor '{}': {}", e.name, why));
  };
  for (auto d : e.shape)
    if (d < 0) what("negative extent in shape");
  std::int64_t elements = 0;
  for (const auto& s : e.shards) {
    check_file_name(s.file, path);
    if (s.offsets.size() != e.shape.size() || s.extents.size() != e.shape.size())
      what("a shard's offsets/extents do not match the tensor's rank");
    for (std::size_t d = 0; d < e.shape.size(); ++d)
      if (s.offsets[d] < 0 || s.extents[d] < 0 || s.offsets[d] > e.shape[d] ||
          s.extents[d] > e.shape[d] - s.offsets[d])
        what(fmt::format("shard at {} of extents {} lies outside the tensor", shape_str(s.offsets),
                         shape_str(s.extents)));
    if (s.byte_length != shape_numel(s.extents) * static_cast<std::int64_t>(dtype_size(e.dtype)))
      what(fmt::format("shard at {}: byte_length {} does not match its extents",
                       shape_str(s.offsets), s.byte_length));
    if (static_cast<std::int64_t>(s.crc32.size()) != block_count(s.byte_length, index.block_bytes))
      what(fmt::format("shard at {}: {} checksums for {} bytes", shape_str(s.offsets),
                       s.crc32.size(), s.byte_length));
    const auto f = index.file_bytes.find(s.file);
    if (f == index.file_bytes.end()) what(fmt::format("file '{}' is not listed", s.file));
    if (s.byte_offset < 0 || s.byte_offset + s.byte_length > f->second)
      what(fmt::format("shard at {} lies past the end of '{}'", shape_str(s.offsets), s.file));
    elements += shape_numel(s.extents);
    if (elements > shape_numel(e.shape))
      what(fmt::format("its shards hold more than the tensor's {} elements", shape_numel(e.shape)));
  }
  // Disjoint boxes inside the shape that hold as many elements as the tensor tile it.
  if (elements != shape_numel(e.shape))
    what(fmt::format("its shards hold {} elements, the tensor {}", elements, shape_numel(e.shape)));
  check_disjoint(e, path);
}

// No two shards share bytes of a file (a save writes each once): with every
// shard inside its file, the bytes the index promises are then bytes the
// files hold, and a buffer sized from it is bounded by their size.
void check_no_shared_bytes(const CheckpointIndex& index, const std::string& path) {
  struct Range {
    std::int64_t begin, end;
    const std::string* tensor;
  };
  std::map<std::string, std::vector<Range>> by_file;
  for (const auto& e : index.tensors)
    for (const auto& s : e.shards)
      if (s.byte_length > 0)
        by_file[s.file].push_back({s.byte_offset, s.byte_offset + s.byte_length, &e.name});
  for (auto& [file, ranges] : by_file) {
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].begin < ranges[i - 1].end)
        malformed(path, fmt::format("file '{}': shards of '{}' and of '{}' share bytes [{}, {})",
                                    file, *ranges[i - 1].tensor, *ranges[i].tensor, ranges[i].begin,
                                    std::min(ranges[i].end, ranges[i - 1].end)));
  }
}

}  // namespace

std::string index_to_json(const CheckpointIndex& index) {
  ordered_json files = ordered_json::object();
  for (const auto& [name, bytes] : index.file_bytes)
    files[name] = {{"bytes", bytes}};
  ordered_json tensors = ordered_json::array();
  for (const auto& e : index.tensors) {
    ordered_json shards = ordered_json::array();
    for (const auto& s : e.shards)
      shards.push_back({{"offsets", s.offsets},
                        {"extents", s.extents},
                        {"file", s.file},
                        {"byte_offset", s.byte_offset},
                        {"byte_length", s.byte_length},
                        {"crc32", s.crc32}});
    tensors.push_back({{"name", e.name},
                       {"shape", e.shape},
                       {"dtype", safetensors_dtype(e.dtype)},
                       {"placements", e.placements},
                       {"mesh_shape", e.mesh_shape},
                       {"shards", shards}});
  }
  ordered_json j = {{"format", kFormatName},
                    {"version", kFormatVersion},
                    {"generation", index.generation},
                    {"checksum", {{"algorithm", "crc32"}, {"block_bytes", index.block_bytes}}},
                    {"files", files},
                    {"tensors", tensors}};
  return j.dump(1) + "\n";
}

CheckpointIndex parse_index(const std::string& text, const std::string& path) {
  CheckpointIndex index;
  try {
    const auto j = ordered_json::parse(text);
    if (j.at("format").get<std::string>() != kFormatName)
      malformed(path, "not a dtensor checkpoint");
    if (j.at("version").get<int>() != kFormatVersion)
      malformed(path, fmt::format("format version {} (this library reads {})",
                                  j.at("version").dump(), kFormatVersion));
    index.generation = j.at("generation").get<std::string>();
    const auto& checksum = j.at("checksum");
    if (checksum.at("algorithm").get<std::string>() != "crc32")
      malformed(path, "checksum algorithm is not crc32");
    index.block_bytes = checksum.at("block_bytes").get<std::int64_t>();
    if (index.block_bytes <= 0) malformed(path, "block_bytes must be positive");
    for (const auto& [name, f] : j.at("files").items()) {
      check_file_name(name, path);
      index.file_bytes[name] = f.at("bytes").get<std::int64_t>();
    }
    for (const auto& t : j.at("tensors")) {
      CheckpointEntry e;
      e.name = t.at("name").get<std::string>();
      e.shape = t.at("shape").get<Shape>();
      e.dtype = parse_safetensors_dtype(t.at("dtype").get<std::string>(),
                                        fmt::format("index '{}', tensor '{}'", path, e.name));
      e.placements = t.at("placements").get<std::string>();
      e.mesh_shape = t.at("mesh_shape").get<std::vector<std::int64_t>>();
      for (const auto& s : t.at("shards"))
        e.shards.push_back(decode_shard(s));
      e.block_bytes = index.block_bytes;
      index.tensors.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& ex) {
    malformed(path, ex.what());
  } catch (const InvalidArgument& ex) {
    malformed(path, ex.what());
  }
  std::set<std::string> names;
  for (const auto& e : index.tensors) {
    if (!names.insert(e.name).second)
      malformed(path, fmt::format("tensor '{}' appears twice", e.name));
    try {
      check_entry(e, index, path);
    } catch (const CheckpointCorrupt&) {
      throw;
    } catch (const InvalidArgument& ex) {  // a shape whose element count overflows
      malformed(path, fmt::format("tensor '{}': {}", e.name, ex.what()));
    }
  }
  check_no_shared_bytes(index, path);
  return index;
}

CheckpointIndex read_index(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / kIndexFileName).string();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec)))
    throw InvalidArgument(
        "checkpoint",
        fmt::format("dir: no checkpoint in '{}' ({})", dir,
                    fs::is_directory(dir, ec) ? "it has no index.json" : "no such directory"));
  // FileReader refuses what is not a regular file (a FIFO would block here forever).
  std::unique_ptr<FileReader> file;
  try {
    file = std::make_unique<FileReader>(path);
  } catch (const Error& ex) {
    malformed(path, ex.what());
  }
  std::string text(static_cast<std::size_t>(file->size()), '\0');
  if (file->read_at(0, text.data(), file->size()) != file->size())
    malformed(path, "it changed while being read");
  return parse_index(text, path);
}

std::string shard_file_name(const std::string& generation, int world_rank) {
  return fmt::format("shards-{}-rank{}.safetensors", generation, world_rank);
}

bool is_save_output(const std::string& name) {
  const bool tmp = name.size() > 4 && name.ends_with(".tmp");
  return name.starts_with("shards-") || (tmp && name.starts_with(kIndexFileName));
}

}  // namespace dtensor::checkpoint
