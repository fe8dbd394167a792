#include "checkpoint/shard_file_writer.h"

#include <fmt/ranges.h>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/block_checksum.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors_format.h"
#include "checkpoint/save_hooks.h"

namespace dtensor::checkpoint {

std::string shard_key(const std::string& name, const Shape& offsets) {
  return fmt::format("{}@{}", name, fmt::join(offsets, ","));
}

WrittenFile write_shard_file(const std::string& dir, const std::string& file,
                             const std::vector<ShardToWrite>& shards, std::int64_t block_bytes) {
  std::vector<SafetensorsItem> items;
  for (const auto& s : shards)
    items.push_back({s.key, s.data.dtype(), s.box.extents});
  const std::string preamble = safetensors_preamble(items);

  DurableWriter out((std::filesystem::path(dir) / file).string());
  out.write(preamble.data(), static_cast<std::int64_t>(preamble.size()));
  WrittenFile written{file, 0, {}};
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = shards[i];
    const auto bytes = static_cast<std::int64_t>(s.data.nbytes());
    CheckpointShard meta{s.box.offsets, s.box.extents,
                         file,          out.bytes_written(),
                         bytes,         block_crc32(s.data.data_ptr(), bytes, block_bytes)};
    out.write(s.data.data_ptr(), bytes);
    written.shards.push_back({s.tensor, std::move(meta)});
    if (i == 0) run_save_hook(SavePhase::ShardFileHalfWritten);
  }
  written.bytes = out.bytes_written();
  out.commit();
  return written;
}

std::string written_file_to_json(const WrittenFile& f) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& w : f.shards)
    shards.push_back({{"tensor", w.tensor},
                      {"offsets", w.shard.offsets},
                      {"extents", w.shard.extents},
                      {"byte_offset", w.shard.byte_offset},
                      {"byte_length", w.shard.byte_length},
                      {"crc32", w.shard.crc32}});
  return nlohmann::json{{"file", f.file}, {"bytes", f.bytes}, {"shards", shards}}.dump();
}

WrittenFile written_file_from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  WrittenFile f{j.at("file").get<std::string>(), j.at("bytes").get<std::int64_t>(), {}};
  for (const auto& s : j.at("shards"))
    f.shards.push_back(
        {s.at("tensor").get<std::size_t>(),
         {s.at("offsets").get<Shape>(), s.at("extents").get<Shape>(), f.file,
          s.at("byte_offset").get<std::int64_t>(), s.at("byte_length").get<std::int64_t>(),
          s.at("crc32").get<std::vector<std::uint32_t>>()}});
  return f;
}

}  // namespace dtensor::checkpoint
