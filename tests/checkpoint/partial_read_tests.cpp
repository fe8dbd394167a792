// Loading reads only what it needs: the checksum blocks that overlap the
// part asked for, counted by the shard reader, and still verified.
#include <cstring>
#include <fstream>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/shard_reader.h"
#include "dtensor/testing.h"
#include "tests/checkpoint/checkpoint_test_support.h"

using namespace dtensor;
using dtensor::testing::require_bit_exact;
using dtensor::testing::seeded;
using dtensor::testing::SharedTempDir;

DTENSOR_TEST_CASE("a part of a shard is read as the blocks that overlap it and no more P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("partial");
  DeviceMesh mesh(DeviceType::CPU, {2});
  // 2048 rows of 4 KiB: each rank's shard is 4 MiB, four 1 MiB checksum blocks.
  const Shape shape{2048, 1024};
  save_checkpoint({{"w", seeded(mesh, {Shard(0)}, shape, DType::F32, 5)}}, dir.path());
  if (get_rank() != 0) return;
  const auto index = checkpoint::read_index(dir.path());
  const CheckpointEntry& e = index.tensors[0];
  REQUIRE(e.block_bytes == std::int64_t{1} << 20);
  const CheckpointShard& first = e.shards[0];  // rows [0, 1024)
  REQUIRE(first.crc32.size() == 4);

  // Rows [300, 600): bytes [1.17 MiB, 2.34 MiB) of the shard, in blocks 1 and 2 only.
  {
    checkpoint::ShardReader reader(dir.path(), index);
    const checkpoint::Box rows{{300, 0}, {300, 1024}};
    Tensor part = Tensor::empty(rows.extents, DType::F32);
    reader.read_region(e, first, rows, rows, part.data_ptr());
    CHECK(reader.bytes_read() == 2 << 20);
    const Tensor want = Tensor::rand_slice(shape, rows.offsets, rows.extents, DType::F32, 5);
    REQUIRE(std::memcmp(part.data_ptr(), want.data_ptr(), want.nbytes()) == 0);
  }
  // Columns [0, 8) of rows [0, 100): 100 runs of 32 bytes, all in block 0.
  {
    checkpoint::ShardReader reader(dir.path(), index);
    const checkpoint::Box cols{{0, 0}, {100, 8}};
    Tensor part = Tensor::empty(cols.extents, DType::F32);
    reader.read_region(e, first, cols, cols, part.data_ptr());
    CHECK(reader.bytes_read() == 1 << 20);
    const Tensor want = Tensor::rand_slice(shape, cols.offsets, cols.extents, DType::F32, 5);
    REQUIRE(std::memcmp(part.data_ptr(), want.data_ptr(), want.nbytes()) == 0);
  }
}

DTENSOR_TEST_CASE("a flipped byte is caught whether the part is read in place or in pieces P=2",
                  "[checkpoint][mp]", 2) {
  SharedTempDir dir("flipped-paths");
  DeviceMesh mesh(DeviceType::CPU, {2});
  const Shape shape{64, 1024};
  save_checkpoint({{"w", seeded(mesh, {Shard(0)}, shape, DType::F32, 6)}}, dir.path());
  const auto index = read_checkpoint_index(dir.path());
  const CheckpointShard last = index[0].shards.back();  // rows [32, 64)
  world()->barrier();
  if (get_rank() == 0) {
    std::fstream f(dir / last.file, std::ios::in | std::ios::out | std::ios::binary);
    const std::int64_t at = last.byte_offset + 4096 * 20 + 7;  // in row 52
    f.seekg(at);
    const char c = static_cast<char>(f.get() ^ 0x5a);
    f.seekp(at);
    f.put(c);
  }
  world()->barrier();
  // Shard(0) on two ranks: rank 1's rows are the whole shard, read in place.
  REQUIRE_THROWS_AS(
      load_checkpoint(dir.path(), {{"w", DTensorSpec(mesh, {Shard(0)}, shape, DType::F32)}}),
      CheckpointCorrupt);
  // Shard(1): every rank reads half of each row, through buffers.
  REQUIRE_THROWS_AS(
      load_checkpoint(dir.path(), {{"w", DTensorSpec(mesh, {Shard(1)}, shape, DType::F32)}}),
      CheckpointCorrupt);
}
