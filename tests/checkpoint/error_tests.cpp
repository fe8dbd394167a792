// What goes wrong is named: a missing tensor, a shape or dtype that differs,
// a truncated or corrupted file (the tensor and the file), a rank whose save
// fails (an error on every rank, the previous checkpoint intact).
#include <filesystem>
#include <fstream>
#include <iterator>

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
