// load_npy_sharded against the whole array: every dtype and header version,
// 1-D and 2x2 meshes, Shard on each dim, uneven splits; the bytes each rank
// reads; and the errors, raised on every rank alike.
#include "tests/data/data_test_support.h"

using namespace dtensor;
using Catch::Matchers::Contains;
using dtensor::testing::expected_index_local;
using dtensor::testing::require_index_local;
using dtensor::testing::SharedTempDir;
using dtensor::testing::write_index_npy;

namespace {

// Writes on rank 0 and waits until every rank can read the file.
void write_shared(const std::string& path, const Shape& shape, const std::string& descr,
                  dtensor::testing::NpyWriteOptions o = {}) {
  if (get_rank() == 0) write_index_npy(path, shape, descr, o);
  world()->barrier();
}

}  // namespace

DTENSOR_TEST_CASE("an npy array loads as its whole on one rank P=1", "[data]", 1) {
  SharedTempDir dir("npy-one");
  DeviceMesh mesh(DeviceType::CPU, {1});
  int k = 0;
  for (const std::string descr : {"<f4", "<f8", "<f2", "<i4", "<i8"})
    for (const int version : {1, 2, 3}) {
      const std::string path = dir / ("a" + std::to_string(k++) + ".npy");
      write_shared(path, {3, 5, 7}, descr, {.version = version});
      const DTensor t = data::load_npy_sharded(path, mesh, {Replicate()});
      CHECK(t.shape() == Shape{3, 5, 7});
      const DType want = descr == "<f4" ? DType::F32 : descr == "<f2" ? DType::F16 : DType::F64;
      CHECK(t.dtype() == want);
      require_index_local(t);
    }
  // Scalars and 1-D arrays, and a requested dtype.
  write_shared(dir / "s.npy", {}, "<f8");
  require_index_local(data::load_npy_sharded(dir / "s.npy", mesh, {Replicate()}));
  write_shared(dir / "v.npy", {9}, "<i8");
  const DTensor v = data::load_npy_sharded(dir / "v.npy", mesh, {Shard(0)}, {.dtype = DType::F32});
  CHECK(v.dtype() == DType::F32);
  require_index_local(v);
}

DTENSOR_TEST_CASE("an npy array loads sharded on dim 0 or 1, evenly or not P=2", "[data][mp]", 2) {
  SharedTempDir dir("npy-two");
  DeviceMesh mesh(DeviceType::CPU, {2});
  int k = 0;
  for (const std::string descr : {"<f4", "<f8", "<f2", "<i4", "<i8"})
    for (const Shape& shape : {Shape{6, 4}, Shape{7, 3}, Shape{5, 9, 2}, Shape{1, 3}})
      for (const Placements& p : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Shard(-1)},
                                  Placements{Replicate()}}) {
        const std::string path = dir / ("a" + std::to_string(k++) + ".npy");
        write_shared(path, shape, descr, {.version = 1 + k % 3});
        const DTensor t = data::load_npy_sharded(path, mesh, p);
        CHECK(t.shape() == shape);
        CHECK(t.placements() ==
              Placements{p[0].normalized(static_cast<std::int64_t>(shape.size()))});
        require_index_local(t);
        // The full tensor is the file's array.
        const DTensorSpec whole(mesh, {Replicate()}, shape, t.dtype());
        const Tensor full = t.full_tensor().to(DType::F64);
        REQUIRE(std::memcmp(full.data_ptr(), expected_index_local(whole).data_ptr(),
                            full.nbytes()) == 0);
      }
}

DTENSOR_TEST_CASE("an npy array loads on a 2x2 mesh and on four ranks P=4", "[data][mp]", 4) {
  SharedTempDir dir("npy-four");
  DeviceMesh mesh22(DeviceType::CPU, {2, 2});
  DeviceMesh mesh4(DeviceType::CPU, {4});
  int k = 0;
  for (const std::string descr : {"<f4", "<f2", "<i8"})
    for (const Shape& shape : {Shape{8, 6, 4}, Shape{5, 3, 7}, Shape{2, 9, 3}}) {
      const std::string path = dir / ("a" + std::to_string(k++) + ".npy");
      write_shared(path, shape, descr);
      for (const Placements& p :
           {Placements{Shard(0), Shard(1)}, Placements{Shard(1), Shard(0)},
            Placements{Shard(2), Shard(2)}, Placements{Replicate(), Shard(1)},
            Placements{Shard(0), Replicate()}, Placements{Replicate(), Replicate()}})
        require_index_local(data::load_npy_sharded(path, mesh22, p));
      for (const Placements& p : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Shard(2)}})
        require_index_local(data::load_npy_sharded(path, mesh4, p));
    }
}

DTENSOR_TEST_CASE("each rank reads only its own slab of the file P=2", "[data][mp]", 2) {
  SharedTempDir dir("npy-bytes");
  DeviceMesh mesh(DeviceType::CPU, {2});
  const std::string path = dir / "big.npy";
  write_shared(path, {64, 1024}, "<f4");  // rows of 4 KiB; 128 bytes of header (v1)
  const std::int64_t r = get_rank(), header = 128, row = 4096;
  data::LoadStats rows;
  require_index_local(
      data::load_npy_sharded(path, mesh, {Shard(0)}, {.dtype = std::nullopt, .stats = &rows}));
  // Rows [32 r, 32 r + 32): one span of 128 KiB, nothing of the other half.
  CHECK(rows.bytes_read == 32 * row);
  CHECK(rows.first_byte == header + 32 * r * row);
  CHECK(rows.end_byte == header + 32 * (r + 1) * row);
  data::LoadStats cols;
  require_index_local(
      data::load_npy_sharded(path, mesh, {Shard(1)}, {.dtype = std::nullopt, .stats = &cols}));
  // Columns [512 r, 512 r + 512) of every row: half of each row, no more.
  CHECK(cols.bytes_read == 64 * row / 2);
  CHECK(cols.first_byte == header + r * row / 2);
  CHECK(cols.end_byte == header + 63 * row + (r + 1) * row / 2);
}

DTENSOR_TEST_CASE("bad npy files and placements fail on every rank, naming the path P=2",
                  "[data][mp]", 2) {
  SharedTempDir dir("npy-errors");
  DeviceMesh mesh(DeviceType::CPU, {2});
  const std::string missing = dir / "missing.npy";
  REQUIRE_THROWS_AS(data::load_npy_sharded(missing, mesh, {Shard(0)}), InvalidArgument);
  REQUIRE_THROWS_WITH(data::load_npy_sharded(missing, mesh, {Shard(0)}),
                      Contains(missing) && Contains("cannot open"));

  write_shared(dir / "f.npy", {4, 4}, "<f4", {.version = 1, .fortran_order = true});
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "f.npy", mesh, {Shard(0)}),
                      Contains(dir / "f.npy") && Contains("Fortran order"));
  write_shared(dir / "t.npy", {4, 4}, "<f8", {.version = 1, .fortran_order = false, .cut = 8});
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "t.npy", mesh, {Shard(0)}),
                      Contains(dir / "t.npy") && Contains("truncated"));
  if (get_rank() == 0) std::ofstream(dir / "x.npy") << "PK\x03\x04 not an npy file";
  world()->barrier();
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "x.npy", mesh, {Shard(0)}),
                      Contains(dir / "x.npy") && Contains("not a .npy file"));
  if (get_rank() == 0) {
    std::string bytes = "\x93NUMPY\x01";
    bytes += '\0';
    bytes += "\x40";
    bytes += '\0';
    bytes += "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }";
    std::ofstream(dir / "b.npy", std::ios::binary) << bytes;
  }
  world()->barrier();
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "b.npy", mesh, {Shard(0)}),
                      Contains(dir / "b.npy") && Contains("truncated .npy header"));

  write_shared(dir / "ok.npy", {4, 4}, "<f4");
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "ok.npy", mesh, {Partial()}),
                      Contains("placements") && Contains("Partial") && Contains(dir / "ok.npy"));
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "ok.npy", mesh, {Shard(2)}),
                      Contains("placements") && Contains(dir / "ok.npy"));
  REQUIRE_THROWS_WITH(data::load_npy_sharded(dir / "ok.npy", mesh, {Shard(0), Shard(1)}),
                      Contains("placements") && Contains(dir / "ok.npy"));

  // A file only rank 1 cannot open: rank 0 fails too, with rank 1's error.
  const std::string mine = get_rank() == 0 ? dir / "ok.npy" : dir / "gone.npy";
  REQUIRE_THROWS_WITH(data::load_npy_sharded(mine, mesh, {Shard(0)}),
                      Contains("rank 1") && Contains(dir / "gone.npy"));
  // Ranks that see different arrays are refused alike.
  write_shared(dir / "other.npy", {4, 5}, "<f4");
  const std::string seen = get_rank() == 0 ? dir / "ok.npy" : dir / "other.npy";
  REQUIRE_THROWS_WITH(data::load_npy_sharded(seen, mesh, {Shard(0)}), Contains("different arrays"));
}

DTENSOR_TEST_CASE("read_npy reads a whole array on one process, without communication P=1",
                  "[data]", 1) {
  SharedTempDir dir("npy-read");
  DeviceMesh mesh(DeviceType::CPU, {1});
  for (const std::string descr : {"<f4", "<f2", "<i4"}) {
    const std::string path = dir / ("r" + descr.substr(1) + ".npy");
    write_index_npy(path, {4, 3, 2}, descr, {.version = 2});
    const Tensor whole = data::read_npy(path);
    const Tensor want =
        expected_index_local(DTensorSpec(mesh, {Replicate()}, {4, 3, 2}, DType::F64));
    REQUIRE(whole.shape() == want.shape());
    const Tensor got = whole.to(DType::F64);
    CHECK(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) == 0);
  }
  write_index_npy(dir / "t.npy", {4, 4}, "<f8", {.version = 1, .fortran_order = false, .cut = 1});
  CHECK_THROWS_WITH(data::read_npy(dir / "t.npy"),
                    Contains(dir / "t.npy") && Contains("truncated"));
  CHECK_THROWS_AS(data::read_npy(dir / "none.npy"), InvalidArgument);
}
