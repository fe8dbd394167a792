// consolidate_checkpoint: one process reads every shard (verifying every
// block) and writes each tensor whole into one safetensors file, tensor by
// tensor, so it holds one tensor in memory at a time.
#include <filesystem>
#include <vector>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors_format.h"
#include "checkpoint/shard_reader.h"
#include "dtensor/checkpoint/checkpoint.h"

namespace dtensor {

void consolidate_checkpoint(const std::string& dir, const std::string& out_file) {
  using namespace checkpoint;
  namespace fs = std::filesystem;
  check_arg(!out_file.empty(), "checkpoint", "consolidate_checkpoint: out_file is empty");
  const CheckpointIndex index = read_index(dir);
  std::vector<SafetensorsItem> items;
  for (const auto& e : index.tensors)
    items.push_back({e.name, e.dtype, e.shape});
  const std::string preamble = safetensors_preamble(items);

  DurableWriter out(out_file);
  out.write(preamble.data(), static_cast<std::int64_t>(preamble.size()));
  ShardReader reader(dir, index);
  for (const auto& e : index.tensors) {
    const Box whole{Shape(e.shape.size(), 0), e.shape};
    // The size comes from the index: allocate it only once the files are
    // known to hold it (an edited index could promise petabytes).
    reader.open_files(e);
    std::vector<char> bytes(
        static_cast<std::size_t>(safetensors_item_bytes({e.name, e.dtype, e.shape})));
    for (const auto& s : e.shards)
      reader.read_region(e, s, Box{s.offsets, s.extents}, whole, bytes.data());
    out.write(bytes.data(), static_cast<std::int64_t>(bytes.size()));
  }
  out.commit();
  const fs::path parent = fs::absolute(out_file).parent_path();
  fsync_directory(parent.string());
}

}  // namespace dtensor
