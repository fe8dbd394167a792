// What goes wrong is named: a missing tensor, a shape or dtype that differs,
// a truncated or corrupted file (the tensor and the file), a rank whose save
// fails (an error on every rank, the previous checkpoint intact).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <nlohmann/json.hpp>

#include "checkpoint/save_hooks.h"
#include "dtensor/testing.h"
#include "tests/checkpoint/checkpoint_test_support.h"

using namespace dtensor;
using Catch::Matchers::Contains;
using dtensor::testing::require_bit_exact;
using dtensor::testing::seeded;
using dtensor::testing::SharedTempDir;

namespace {

const Shape kShape{64, 1024};  // 256 KiB of f32, 128 KiB per rank

NamedDTensors weights(const DeviceMesh& mesh, std::uint64_t seed) {
  return {{"encoder.weight", seeded(mesh, {Shard(0)}, kShape, DType::F32, seed)}};
}

std::vector<CheckpointTarget> replicated_target(const DeviceMesh& mesh) {
  return {{"encoder.weight", DTensorSpec(mesh, {Replicate()}, kShape, DType::F32)}};
}

// The shard file of rank 1 (the second half of the rows).
std::string rank1_file(const std::string& dir) {
  const auto index = read_checkpoint_index(dir);
  for (const auto& sh : index[0].shards)
    if (sh.file.ends_with("-rank1.safetensors")) return sh.file;
  FAIL("no shard file of rank 1");
  return {};
}

// Rank 0 rewrites the index through `edit`; every rank waits for it.
template <typename F>
void edit_index(const SharedTempDir& dir, F&& edit) {
  world()->barrier();
  if (get_rank() == 0) {
    std::ifstream in(dir / "index.json");
    auto j = nlohmann::ordered_json::parse(in);
    edit(j);
    std::ofstream(dir / "index.json") << j.dump(1);
  }
  world()->barrier();
}

// Runs `fn` on a thread: a read that blocks (a FIFO opened without
// O_NONBLOCK) fails the test instead of hanging it. The thread is then left
// to the process's end: nothing else can unblock it.
template <typename F>
void require_returns_within_5s(F&& fn) {
  auto done = std::async(std::launch::async, std::forward<F>(fn));
  if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    FAIL_CHECK("still blocked after 5 s");
    std::_Exit(1);  // the blocked thread would keep the test from ending
  }
  done.get();
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

}  // namespace

DTENSOR_TEST_CASE("load names every missing tensor and every one whose shape or dtype differs P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("mismatch");
  DeviceMesh mesh(DeviceType::CPU, {2});
  save_checkpoint(weights(mesh, 1), dir.path());
  REQUIRE_THROWS_WITH(
      load_checkpoint(dir.path(),
                      {{"decoder.bias", DTensorSpec(mesh, {Replicate()}, {4}, DType::F32)}}),
      Contains("'decoder.bias' is not in the checkpoint"));
  REQUIRE_THROWS_AS(
      load_checkpoint(dir.path(), {{"encoder.weight",
                                    DTensorSpec(mesh, {Replicate()}, {64, 1000}, DType::F32)}}),
      InvalidArgument);
  REQUIRE_THROWS_WITH(
      load_checkpoint(dir.path(), {{"encoder.weight",
                                    DTensorSpec(mesh, {Replicate()}, {64, 1000}, DType::F32)}}),
      Contains("'encoder.weight'") && Contains("shape [64, 1024]"));
  REQUIRE_THROWS_WITH(
      load_checkpoint(dir.path(),
                      {{"encoder.weight", DTensorSpec(mesh, {Replicate()}, kShape, DType::F64)}}),
      Contains("'encoder.weight'") && Contains("f32"));
  REQUIRE_THROWS_AS(load_checkpoint(dir / "nothing-here", replicated_target(mesh)),
                    InvalidArgument);
  REQUIRE_THROWS_AS(save_checkpoint({{"a", seeded(mesh, {Shard(0)}, {4}, DType::F32, 1)},
                                     {"a", seeded(mesh, {Shard(0)}, {4}, DType::F32, 1)}},
                                    dir.path()),
                    InvalidArgument);
  // Every mismatched target at once, behind one prefix.
  std::string error;
  try {
    load_checkpoint(dir.path(),
                    {{"decoder.bias", DTensorSpec(mesh, {Replicate()}, {4}, DType::F32)},
                     {"encoder.weight", DTensorSpec(mesh, {Replicate()}, {64, 1000}, DType::F32)},
                     {"decoder.weight", DTensorSpec(mesh, {Replicate()}, {4}, DType::F32)}});
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(error.find("'decoder.bias' is not in the checkpoint") != std::string::npos);
  CHECK(error.find("'encoder.weight': the checkpoint holds shape [64, 1024], the target asks for "
                   "[64, 1000]") != std::string::npos);
  CHECK(error.find("'decoder.weight' is not in the checkpoint") != std::string::npos);
  CHECK(error.find("3 of 3 target(s)") != std::string::npos);
  CHECK(occurrences(error, "[dtensor.checkpoint]") == 1);
  CHECK(occurrences(error, "load_checkpoint:") == 1);
}

DTENSOR_TEST_CASE("a truncated shard file is an error naming the tensor and the file P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("truncated");
  DeviceMesh mesh(DeviceType::CPU, {2});
  save_checkpoint(weights(mesh, 1), dir.path());
  const std::string file = rank1_file(dir.path());
  world()->barrier();
  if (get_rank() == 0)
    std::filesystem::resize_file(dir / file, std::filesystem::file_size(dir / file) - 100);
  world()->barrier();
  REQUIRE_THROWS_AS(load_checkpoint(dir.path(), replicated_target(mesh)), CheckpointCorrupt);
  REQUIRE_THROWS_WITH(load_checkpoint(dir.path(), replicated_target(mesh)),
                      Contains("'encoder.weight'") && Contains(file) && Contains("truncated"));
  // Shard(0): rank 0 reads only the intact file, but the error is collective,
  // so rank 1's failure reaches rank 0 too.
  REQUIRE_THROWS_AS(
      load_checkpoint(dir.path(),
                      {{"encoder.weight", DTensorSpec(mesh, {Shard(0)}, kShape, DType::F32)}}),
      CheckpointCorrupt);
  REQUIRE_THROWS_AS(consolidate_checkpoint(dir.path(), dir / "whole.safetensors"),
                    CheckpointCorrupt);
}

DTENSOR_TEST_CASE("a flipped byte is a checksum error naming the tensor and the file P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("flipped");
  DeviceMesh mesh(DeviceType::CPU, {2});
  auto tensors = weights(mesh, 1);
  tensors.emplace_back("decoder.weight", seeded(mesh, {Shard(0)}, {8, 8}, DType::F64, 2));
  save_checkpoint(tensors, dir.path());
  const std::string file = rank1_file(dir.path());
  std::int64_t at = 0;
  const auto index = read_checkpoint_index(dir.path());
  for (const auto& sh : index[0].shards)
    if (sh.file == file) at = sh.byte_offset + sh.byte_length / 2;
  world()->barrier();
  if (get_rank() == 0) {
    std::fstream f(dir / file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(at);
    f.write(&c, 1);
  }
  world()->barrier();
  REQUIRE_THROWS_AS(load_checkpoint(dir.path(), replicated_target(mesh)), CheckpointCorrupt);
  REQUIRE_THROWS_WITH(
      load_checkpoint(dir.path(), replicated_target(mesh)),
      Contains("'encoder.weight'") && Contains(file) && Contains("checksum mismatch"));
  // The other tensor in the same files still loads: a reader reads and
  // verifies only the blocks of what it loads, not whole files.
  const auto ok = load_checkpoint(
      dir.path(), {{"decoder.weight", DTensorSpec(mesh, {Replicate()}, {8, 8}, DType::F64)}});
  require_bit_exact("decoder.weight", ok[0].second, 2);
}

DTENSOR_TEST_CASE("a save that fails on one rank fails on every rank and keeps the old one P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("failing");
  DeviceMesh mesh(DeviceType::CPU, {2});
  save_checkpoint(weights(mesh, 1), dir.path());
  const auto before = read_checkpoint_index(dir.path());
  if (get_rank() == 1)
    checkpoint::set_save_hook([](checkpoint::SavePhase p) {
      if (p == checkpoint::SavePhase::ShardFileWritten)
        throw std::runtime_error("disk full (injected)");
    });
  REQUIRE_THROWS_WITH(save_checkpoint(weights(mesh, 2), dir.path()),
                      Contains("rank 1") && Contains("disk full (injected)"));
  checkpoint::set_save_hook({});
  // The old index and its files are what is there: the new files were removed.
  const auto after = read_checkpoint_index(dir.path());
  REQUIRE(after[0].shards[0].file == before[0].shards[0].file);
  world()->barrier();
  std::size_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
    (void)f;
    ++files;
  }
  REQUIRE(files == 3);  // index.json and the two shard files
  require_bit_exact("encoder.weight",
                    load_checkpoint(dir.path(), replicated_target(mesh))[0].second, 1);
}

DTENSOR_TEST_CASE("a save whose index cannot be renamed into place leaves no shard file P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("rename");
  DeviceMesh mesh(DeviceType::CPU, {2});
  // A non-empty directory named index.json: rename(2) onto it fails, for
  // root too (permission bits would not stop root).
  if (get_rank() == 0) {
    std::filesystem::create_directories(dir / "index.json");
    std::ofstream(std::filesystem::path(dir / "index.json") / "keep") << "x";
  }
  world()->barrier();
  REQUIRE_THROWS_WITH(save_checkpoint(weights(mesh, 1), dir.path()),
                      Contains("rank 0") && Contains("index.json"));
  world()->barrier();
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(dir.path()))
    names.push_back(f.path().filename().string());
  INFO(fmt::format("{}", fmt::join(names, ", ")));
  REQUIRE(names == std::vector<std::string>{"index.json"});
  world()->barrier();
}

DTENSOR_TEST_CASE("a malformed index is an error naming the index P=1", "[checkpoint][mp]", 1) {
  SharedTempDir dir("malformed");
  DeviceMesh mesh(DeviceType::CPU, {1});
  save_checkpoint(weights(mesh, 1), dir.path());
  std::ifstream in(dir / "index.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A byte length that no longer matches the shard's extents, then text that is not JSON.
  const auto at = text.find("\"byte_length\": ");
  REQUIRE(at != std::string::npos);
  std::string wrong = text;
  wrong.insert(at + 15, "1");
  std::ofstream(dir / "index.json") << wrong;
  REQUIRE_THROWS_AS(read_checkpoint_index(dir.path()), CheckpointCorrupt);
  REQUIRE_THROWS_WITH(read_checkpoint_index(dir.path()), Contains("index.json") &&
                                                             Contains("'encoder.weight'") &&
                                                             Contains("byte_length"));
  std::ofstream(dir / "index.json") << text.substr(0, text.size() / 2);
  REQUIRE_THROWS_WITH(load_checkpoint(dir.path(), replicated_target(mesh)),
                      Contains("index.json") && Contains("malformed"));
}

DTENSOR_TEST_CASE("an index whose shards overlap and leave a gap is refused P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("overlap");
  DeviceMesh mesh(DeviceType::CPU, {2});
  save_checkpoint(weights(mesh, 1), dir.path());
  // Rank 1's shard (rows 32-63) moved up to rows 16-47: rows 16-31 twice,
  // rows 48-63 never, the element count unchanged.
  edit_index(dir, [](nlohmann::ordered_json& j) {
    for (auto& sh : j["tensors"][0]["shards"])
      if (sh["offsets"][0] == 32) sh["offsets"][0] = 16;
  });
  REQUIRE_THROWS_AS(read_checkpoint_index(dir.path()), CheckpointCorrupt);
  REQUIRE_THROWS_WITH(read_checkpoint_index(dir.path()),
                      Contains("index.json") && Contains("'encoder.weight'") &&
                          Contains("overlap") && Contains("[16, 0]"));
  REQUIRE_THROWS_AS(load_checkpoint(dir.path(), replicated_target(mesh)), CheckpointCorrupt);
  REQUIRE_THROWS_WITH(
      load_checkpoint(dir.path(), replicated_target(mesh)),
      Contains("index.json") && Contains("'encoder.weight'") && Contains("overlap"));
  if (get_rank() == 0) {
    REQUIRE_THROWS_AS(consolidate_checkpoint(dir.path(), dir / "whole.safetensors"),
                      CheckpointCorrupt);
    REQUIRE_FALSE(std::filesystem::exists(dir / "whole.safetensors"));
  }
  // Two shards of the same rows side by side: overlap in dim 0 alone is not enough.
  edit_index(dir, [](nlohmann::ordered_json& j) {
    auto& shards = j["tensors"][0]["shards"];
    shards[0]["offsets"] = {0, 0};
    shards[1]["offsets"] = {32, 0};
  });
  REQUIRE(read_checkpoint_index(dir.path())[0].shards.size() == 2);
  require_bit_exact("encoder.weight",
                    load_checkpoint(dir.path(), replicated_target(mesh))[0].second, 1);
}

DTENSOR_TEST_CASE("an index promising more bytes than its files hold allocates nothing P=1",
                  "[checkpoint][mp]", 1) {
  SharedTempDir dir("promise");
  DeviceMesh mesh(DeviceType::CPU, {1});
  save_checkpoint(weights(mesh, 1), dir.path());
  const auto saved = read_checkpoint_index(dir.path())[0].shards[0];
  // 2^40 rows of 1024 f32 (4 PiB) in one shard, consistent in itself: one
  // checksum block, the file listed as that long. Consolidating sized its
  // buffer from this and threw std::bad_alloc.
  const std::int64_t rows = std::int64_t{1} << 40, bytes = rows * 1024 * 4;
  edit_index(dir, [&](nlohmann::ordered_json& j) {
    auto& t = j["tensors"][0];
    t["shape"] = {rows, 1024};
    t["shards"][0]["extents"] = {rows, 1024};
    t["shards"][0]["byte_length"] = bytes;
    t["shards"][0]["crc32"] = {saved.crc32[0]};
    j["checksum"]["block_bytes"] = bytes;
    j["files"][saved.file]["bytes"] = saved.byte_offset + bytes;
  });
  REQUIRE_THROWS_AS(consolidate_checkpoint(dir.path(), dir / "whole.safetensors"),
                    CheckpointCorrupt);
  REQUIRE_THROWS_WITH(consolidate_checkpoint(dir.path(), dir / "whole.safetensors"),
                      Contains(saved.file) && Contains("truncated"));
  // Two shards on the same bytes of one file: refused when the index is read.
  save_checkpoint({{"a", seeded(mesh, {Replicate()}, {4}, DType::F32, 1)},
                   {"b", seeded(mesh, {Replicate()}, {4}, DType::F32, 2)}},
                  dir.path());
  edit_index(dir, [](nlohmann::ordered_json& j) {
    j["tensors"][1]["shards"][0]["byte_offset"] = j["tensors"][0]["shards"][0]["byte_offset"];
  });
  REQUIRE_THROWS_WITH(read_checkpoint_index(dir.path()),
                      Contains("index.json") && Contains("share bytes"));
}

DTENSOR_TEST_CASE("an index naming a file outside the checkpoint is refused P=1",
                  "[checkpoint][mp]", 1) {
  SharedTempDir dir("outside");
  DeviceMesh mesh(DeviceType::CPU, {1});
  save_checkpoint(weights(mesh, 1), dir.path());
  const std::string file = read_checkpoint_index(dir.path())[0].shards[0].file;
  // A copy of the real shard file one level up: it would load the right values.
  const std::string outside = "dtensor-ckpt-outside-" + std::to_string(::getpid()) + ".safetensors";
  std::filesystem::copy_file(dir / file, dir / ("../" + outside));
  for (const std::string& bad :
       {"../" + outside, std::string("/etc/passwd"), std::string("."), std::string(".."),
        std::string("sub/") + file, file + std::string(1, '\0') + "x", std::string()}) {
    INFO("file name: " << bad);
    edit_index(dir, [&](nlohmann::ordered_json& j) {
      auto& files = j["files"];
      const auto bytes = files.begin().value();
      files = nlohmann::ordered_json::object();
      files[bad] = bytes;
      j["tensors"][0]["shards"][0]["file"] = bad;
    });
    REQUIRE_THROWS_AS(read_checkpoint_index(dir.path()), CheckpointCorrupt);
    REQUIRE_THROWS_WITH(read_checkpoint_index(dir.path()),
                        Contains("index.json") && Contains("not a plain file name"));
    REQUIRE_THROWS_AS(load_checkpoint(dir.path(), replicated_target(mesh)), CheckpointCorrupt);
  }
  std::filesystem::remove(dir / ("../" + outside));
}

DTENSOR_TEST_CASE("a FIFO in place of the index or a shard file is refused, not waited on P=1",
                  "[checkpoint][mp]", 1) {
  SharedTempDir dir("fifo");
  DeviceMesh mesh(DeviceType::CPU, {1});
  save_checkpoint(weights(mesh, 1), dir.path());
  const std::string file = read_checkpoint_index(dir.path())[0].shards[0].file;
  std::filesystem::rename(dir / file, dir / (file + ".saved"));
  REQUIRE(::mkfifo((dir / file).c_str(), 0600) == 0);
  require_returns_within_5s([&] {
    REQUIRE_THROWS_WITH(load_checkpoint(dir.path(), replicated_target(mesh)),
                        Contains(file) && Contains("not a regular file"));
    REQUIRE_THROWS_AS(consolidate_checkpoint(dir.path(), dir / "whole.safetensors"),
                      CheckpointCorrupt);
    REQUIRE_THROWS_AS(read_safetensors(dir / file), InvalidArgument);
  });
  std::filesystem::rename(dir / "index.json", dir / "index.json.saved");
  REQUIRE(::mkfifo((dir / "index.json").c_str(), 0600) == 0);
  require_returns_within_5s([&] {
    REQUIRE_THROWS_AS(read_checkpoint_index(dir.path()), CheckpointCorrupt);
    REQUIRE_THROWS_WITH(read_checkpoint_index(dir.path()),
                        Contains("index.json") && Contains("not a regular file"));
    REQUIRE_THROWS_AS(load_checkpoint(dir.path(), replicated_target(mesh)), CheckpointCorrupt);
  });
  // A directory in its place is refused the same way.
  std::filesystem::remove(dir / "index.json");
  std::filesystem::create_directory(dir / "index.json");
  REQUIRE_THROWS_WITH(read_checkpoint_index(dir.path()), Contains("not a regular file"));
}
