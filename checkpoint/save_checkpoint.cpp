// save_checkpoint: the commit protocol (docs/checkpoints.md).
//   1. agree on the call (names, specs) and on a fresh generation id;
//   2. reduce Partial tensors; every rank writes the shards it owns to its own
//      file named with the generation (fsync, rename);
//   3. one all-gather carries each rank's byte ranges and checksums, or its
//      error: any failure is raised on every rank, the new files removed;
//   4. the index rank writes the index under a temporary name, fsyncs it and
//      the directory, and renames it into place: the commit point;
//   5. it removes the files no index refers to (the previous generation,
//      leftovers of crashed saves) and tells every rank how the commit went.
// Until the rename in 4 the previous index and its files are untouched.
#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "checkpoint/block_checksum.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/collective_outcome.h"
#include "checkpoint/coordinating_group.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/save_hooks.h"
#include "checkpoint/save_plan.h"
#include "checkpoint/shard_file_writer.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/core/logging.h"
#include "dtensor/placement/rank_agreement.h"

namespace dtensor {

namespace {

namespace fs = std::filesystem;
using namespace checkpoint;

void check_names(const NamedDTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    check_arg(!name.empty(), "checkpoint", "save_checkpoint: tensors: a tensor has an empty name");
    check_arg(seen.insert(name).second, "checkpoint",
              "save_checkpoint: tensors: the name '{}' appears twice", name);
  }
}

// 64 random bits from rank 0, as hex: the same on every rank, new for every save.
std::string agree_generation(ProcessGroup& group) {
  std::uint64_t id = 0;
  if (group.rank() == 0) {
    std::random_device rd;
    const auto now =
        static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    id = (static_cast<std::uint64_t>(rd()) << 32 ^ rd()) ^ now;
  }
  // Two 32-bit halves, each exact in a double.
  Tensor halves = Tensor::empty({2}, DType::F64);
  halves.data<double>()[0] = static_cast<double>(id >> 32);
  halves.data<double>()[1] = static_cast<double>(id & 0xffffffffu);
  group.broadcast(halves, 0);
  id = static_cast<std::uint64_t>(halves.data<double>()[0]) << 32 |
       static_cast<std::uint64_t>(halves.data<double>()[1]);
  return fmt::format("{:016x}", id);
}

// Partial placements become Replicate (the reduction happens here, collectively).
DTensor reduced(const DTensor& t) {
  if (!t.spec().has_partial()) return t;
  Placements p = t.placements();
  for (auto& pl : p)
    if (pl.is_partial()) pl = Replicate();
  return t.redistribute(t.mesh(), p);
}

// The shards this rank owns, with their data on the CPU.
std::vector<ShardToWrite> my_shards(const NamedDTensors& tensors, const std::vector<DTensor>& ready,
                                    int my_rank) {
  std::vector<ShardToWrite> out;
  for (std::size_t i = 0; i < ready.size(); ++i)
    for (const auto& planned : plan_shards(ready[i].spec())) {
      if (planned.owner != my_rank) continue;
      const Tensor& local = ready[i].to_local();
      DTENSOR_CHECK_ARG(
          local.shape() == planned.box.extents, "checkpoint",
          "save_checkpoint: tensor '{}': the local tensor's shape {} is not the shard's {}",
          tensors[i].first, shape_str(local.shape()), shape_str(planned.box.extents));
      out.push_back({i, shard_key(tensors[i].first, planned.box.offsets), planned.box,
                     local.to(Device::cpu()).contiguous()});
    }
  return out;
}

CheckpointIndex build_index(const NamedDTensors& tensors, const std::vector<DTensor>& ready,
                            const std::string& generation,
                            const std::vector<std::string>& payloads) {
  CheckpointIndex index;
  index.generation = generation;
  index.block_bytes = kChecksumBlockBytes;
  std::map<std::pair<std::size_t, Shape>, CheckpointShard> written;
  for (const auto& payload : payloads) {
    if (payload.empty()) continue;  // a rank that owns nothing
    auto f = written_file_from_json(payload);
    index.file_bytes[f.file] = f.bytes;
    for (auto& w : f.shards)
      written[{w.tensor, w.shard.offsets}] = std::move(w.shard);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DTensorSpec& spec = tensors[i].second.spec();
    CheckpointEntry e;
    e.name = tensors[i].first;
    e.shape = spec.shape();
    e.dtype = spec.dtype();
    e.placements = placements_str(spec.placements());
    e.mesh_shape = spec.mesh().shape();
    e.block_bytes = index.block_bytes;
    for (const auto& planned : plan_shards(ready[i].spec()))
      e.shards.push_back(std::move(written.at({i, planned.box.offsets})));
    index.tensors.push_back(std::move(e));
  }
  return index;
}

// Removes what a save writes but no index refers to: the previous
// generation's files, and leftovers of saves that crashed. Best effort: a
// file left behind wastes space, never correctness.
void remove_unreferenced(const std::string& dir, const CheckpointIndex& index) {
  try {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (!is_save_output(name) || index.file_bytes.count(name)) continue;
      std::error_code ec;
      fs::remove(entry.path(), ec);
      if (ec)
        log::warn("checkpoint: could not remove '{}': {}", entry.path().string(), ec.message());
    }
  } catch (const fs::filesystem_error& e) {
    // The commit has happened: a failed cleanup must not make the save fail.
    log::warn("checkpoint: could not clean up '{}': {}", dir, e.what());
  }
}

void commit_index(const std::string& dir, const CheckpointIndex& index) {
  try {
    fsync_directory(dir);  // the shard files' renames first
    DurableWriter out((fs::path(dir) / kIndexFileName).string());
    const std::string text = index_to_json(index);
    out.write(text.data(), static_cast<std::int64_t>(text.size()));
    run_save_hook(SavePhase::IndexWritten);
    out.commit();
  } catch (...) {
    // The index was not renamed into place (a full disk, index.json a
    // directory), so no index refers to this save's shard files, and every
    // rank's is written by now (the outcomes were gathered): remove them
    // here, as no later save would unless it committed. The directory is
    // one that every rank sees. After the rename they are the checkpoint.
    for (const auto& [name, bytes] : index.file_bytes) {
      std::error_code ec;
      fs::remove(fs::path(dir) / name, ec);
    }
    throw;
  }
  fsync_directory(dir);
  run_save_hook(SavePhase::IndexCommitted);
  remove_unreferenced(dir, index);
}

}  // namespace

void save_checkpoint(const NamedDTensors& tensors, const std::string& dir) {
  check_arg(!dir.empty(), "checkpoint", "save_checkpoint: dir is empty");
  check_names(tensors);
  std::vector<std::string> names;
  std::vector<const DTensorSpec*> specs;
  for (const auto& [name, t] : tensors) {
    names.push_back(name);
    specs.push_back(&t.spec());
  }
  auto group = coordinating_group(specs, "save_checkpoint");
  const auto call = describe_call(names, specs);
  check_ranks_agree(*group, call.fingerprint, "save_checkpoint", call.text);

  const std::string generation = agree_generation(*group);
  std::vector<DTensor> ready;
  for (const auto& [name, t] : tensors)
    ready.push_back(reduced(t));

  const int my_rank = group->global_ranks()[static_cast<std::size_t>(group->rank())];
  const std::string my_file = shard_file_name(generation, my_rank);
  std::string payload;
  std::exception_ptr error;
  try {
    fs::create_directories(dir);
    const auto shards = my_shards(tensors, ready, my_rank);
    if (!shards.empty())
      payload = written_file_to_json(write_shard_file(dir, my_file, shards, kChecksumBlockBytes));
    run_save_hook(SavePhase::ShardFileWritten);
  } catch (const fs::filesystem_error& e) {
    error = std::make_exception_ptr(
        Error("checkpoint", fmt::format("dir '{}': {}", dir, e.code().message())));
  } catch (...) {
    error = std::current_exception();
  }
  std::vector<std::string> payloads;
  try {
    payloads = gather_outcomes(*group, error, payload, "save_checkpoint");
  } catch (...) {
    std::error_code ec;
    fs::remove(fs::path(dir) / my_file, ec);  // no index refers to it
    throw;
  }

  std::exception_ptr commit_error;
  if (group->rank() == 0) {
    try {
      commit_index(dir, build_index(tensors, ready, generation, payloads));
    } catch (...) {
      commit_error = std::current_exception();
    }
  }
  gather_outcomes(*group, commit_error, "", "save_checkpoint");
}

}  // namespace dtensor
