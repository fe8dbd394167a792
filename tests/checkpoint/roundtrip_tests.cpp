// Save on one mesh, load on others: every loaded part equals the original
// global tensor bit for bit, whatever the mesh, placements and number of ranks.
#include <filesystem>
#include <set>

#include "dtensor/testing.h"
#include "tests/checkpoint/checkpoint_test_support.h"

using namespace dtensor;
using dtensor::testing::require_bit_exact;
using dtensor::testing::seeded;
using dtensor::testing::SharedTempDir;

namespace {

struct Saved {
  std::string name;
  Shape shape;
  DType dtype;
  Placements placements;  // on the 2x2 mesh
  std::uint64_t seed;
};

// Every case the format has to get right, on a 2x2 mesh.
const std::vector<Saved>& saved_tensors() {
  static const std::vector<Saved> all = {
      {"conv.weight", {3, 2, 5, 7}, DType::F32, {Shard(2), Shard(3)}, 11},  // 4-D, uneven 5 and 7
      {"rows", {9, 4}, DType::F64, {Shard(0), Replicate()}, 12},  // replicated: written once
      {"bf", {5, 3}, DType::BF16, {Replicate(), Shard(1)}, 13},
      {"half", {2, 6}, DType::F16, {Shard(1), Shard(0)}, 14},
      {"step", {}, DType::F64, {Replicate(), Replicate()}, 15},    // 0-d
      {"tiny", {1, 4}, DType::F32, {Shard(0), Shard(0)}, 16},      // three of four shards empty
      {"empty", {0, 3}, DType::F32, {Shard(0), Replicate()}, 17},  // nothing at all
      {"grad", {4, 4}, DType::F32, {Partial(), Shard(0)}, 18},     // reduced before saving
  };
  return all;
}

NamedDTensors make_saved(const DeviceMesh& mesh) {
  NamedDTensors out;
  for (const auto& s : saved_tensors())
    out.emplace_back(s.name, seeded(mesh, s.placements, s.shape, s.dtype, s.seed));
  return out;
}

// Loads every saved tensor onto `mesh` with placements from `placements_for`
// and checks each rank's part against the original.
template <typename PlacementsFor>
void load_and_check(const std::string& dir, const DeviceMesh& mesh, PlacementsFor placements_for) {
  std::vector<CheckpointTarget> targets;
  for (const auto& s : saved_tensors())
    targets.push_back({s.name, DTensorSpec(mesh, placements_for(s), s.shape, s.dtype)});
  const auto loaded = load_checkpoint(dir, targets);
  REQUIRE(loaded.size() == targets.size());
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    REQUIRE(loaded[i].first == targets[i].name);
    require_bit_exact(loaded[i].first, loaded[i].second, saved_tensors()[i].seed);
  }
}

}  // namespace

DTENSOR_TEST_CASE("checkpoint saved on 2x2 loads bit-exactly on 1 2 3 and 4 ranks P=4",
                  "[checkpoint][mp]", 4) {
  SharedTempDir dir("roundtrip");
  DeviceMesh mesh22(DeviceType::CPU, {2, 2});
  save_checkpoint(make_saved(mesh22), dir.path());

  // The same layout.
  load_and_check(dir.path(), mesh22, [](const Saved& s) { return s.placements; });
  // Placements swapped over the mesh dims.
  load_and_check(dir.path(), mesh22, [](const Saved& s) {
    return Placements{s.placements[1], s.placements[0]};
  });
  // Four ranks in a row, each tensor split on its last dim (or replicated when 0-d).
  DeviceMesh mesh4(DeviceType::CPU, {4});
  load_and_check(dir.path(), mesh4, [](const Saved& s) {
    return s.shape.empty() ? Placements{Replicate()} : Placements{Shard(-1)};
  });
  // Three ranks (1, 2, 3) split on dim 0; rank 0 is not in the mesh and does not call.
  DeviceMesh mesh3(DeviceType::CPU, {3}, {1, 2, 3});
  if (get_rank() != 0)
    load_and_check(dir.path(), mesh3, [](const Saved& s) {
      return s.shape.empty() ? Placements{Replicate()} : Placements{Shard(0)};
    });
  // Two ranks (2, 3) as Partial(sum): the value on index 0, zeros on index 1.
  DeviceMesh mesh2(DeviceType::CPU, {2}, {2, 3});
  if (get_rank() >= 2)
    load_and_check(dir.path(), mesh2, [](const Saved&) { return Placements{Partial()}; });
  // One rank holds everything.
  DeviceMesh mesh1(DeviceType::CPU, {1}, {0});
  if (get_rank() == 0)
    load_and_check(dir.path(), mesh1, [](const Saved&) { return Placements{Replicate()}; });
}

DTENSOR_TEST_CASE("checkpoint index lists shapes dtypes placements and each shard once P=4",
                  "[checkpoint][mp]", 4) {
  SharedTempDir dir("index");
  DeviceMesh mesh22(DeviceType::CPU, {2, 2});
  save_checkpoint(make_saved(mesh22), dir.path());
  const auto entries = read_checkpoint_index(dir.path());
  REQUIRE(entries.size() == saved_tensors().size());
  std::set<std::string> files;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const auto& s = saved_tensors()[i];
    INFO(e.name);
    REQUIRE(e.name == s.name);
    REQUIRE(e.shape == s.shape);
    REQUIRE(e.dtype == s.dtype);
    REQUIRE(e.placements == placements_str(s.placements));
    REQUIRE(e.mesh_shape == Shape{2, 2});
    std::int64_t numel = 0;
    for (const auto& sh : e.shards) {
      numel += shape_numel(sh.extents);
      REQUIRE(sh.byte_length == shape_numel(sh.extents) * std::int64_t(dtype_size(e.dtype)));
      files.insert(sh.file);
    }
    REQUIRE(numel == shape_numel(e.shape));  // every element once: no replica written twice
  }
  // Shard counts by hand: S2 (5 -> 3,2) x S3 (7 -> 4,3) = 4; S0,R = 2; R,S1 = 2; S1,S0 = 4;
  // 0-d = 1; [1, 4] split twice on dim 0 = 1 non-empty; [0, 3] = none; P,S0 = 2.
  const std::vector<std::size_t> shard_counts = {4, 2, 2, 4, 1, 1, 0, 2};
  for (std::size_t i = 0; i < entries.size(); ++i)
    REQUIRE(entries[i].shards.size() == shard_counts[i]);
  // Replicas are written by the lowest rank holding them: rows (S0,R) by ranks 0 and 2.
  for (const auto& sh : entries[1].shards)
    REQUIRE((sh.file.ends_with("-rank0.safetensors") || sh.file.ends_with("-rank2.safetensors")));
  // Only files the index names are in the directory (besides the index itself).
  std::set<std::string> present;
  for (const auto& f : std::filesystem::directory_iterator(dir.path()))
    present.insert(f.path().filename().string());
  files.insert("index.json");
  REQUIRE(present == files);
}

DTENSOR_TEST_CASE("checkpoint saved on 2 ranks as Shard(0) loads on 1 rank and as Shard(1) P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("two");
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Shape shape{7, 5};  // 7 rows over 2 ranks: 4 and 3
  save_checkpoint({{"w", seeded(mesh, {Shard(0)}, shape, DType::F32, 3)},
                   {"b", seeded(mesh, {Replicate()}, {5}, DType::BF16, 4)}},
                  dir.path());
  const auto as_s1 =
      load_checkpoint(dir.path(), {{"w", DTensorSpec(mesh, {Shard(1)}, shape, DType::F32)},
                                   {"b", DTensorSpec(mesh, {Shard(0)}, {5}, DType::BF16)}});
  require_bit_exact("w", as_s1[0].second, 3);
  require_bit_exact("b", as_s1[1].second, 4);
  DeviceMesh one(DeviceType::CPU, {1}, {1});
  if (get_rank() == 1) {
    const auto whole =
        load_checkpoint(dir.path(), {{"w", DTensorSpec(one, {Replicate()}, shape, DType::F32)}});
    require_bit_exact("w", whole[0].second, 3);
  }
}

DTENSOR_TEST_CASE("a second save replaces the first and removes its files P=2", "[checkpoint][mp]",
                  2) {
  SharedTempDir dir("resave");
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Shape shape{6, 3};
  save_checkpoint({{"w", seeded(mesh, {Shard(0)}, shape, DType::F64, 1)}}, dir.path());
  const auto first = read_checkpoint_index(dir.path());
  save_checkpoint({{"w", seeded(mesh, {Shard(0)}, shape, DType::F64, 2)}}, dir.path());
  const auto second = read_checkpoint_index(dir.path());
  REQUIRE(first[0].shards[0].file != second[0].shards[0].file);  // a new generation
  for (const auto& sh : first[0].shards)
    REQUIRE_FALSE(std::filesystem::exists(dir / sh.file));
  const auto loaded =
      load_checkpoint(dir.path(), {{"w", DTensorSpec(mesh, {Replicate()}, shape, DType::F64)}});
  require_bit_exact("w", loaded[0].second, 2);
}
