// Integer .npy arrays loaded as the i64 dtype: '<i8' and '<i4' sharded on 1,
// 2 and 4 ranks (uneven splits) against the values written, values beyond
// 2^53 kept exactly, read_npy with a dtype, the default (F64) unchanged, and
// a float array asked for as i64 refused on every rank, naming the path.
#include <fstream>

#include "tests/data/data_test_support.h"

using namespace dtensor;
using Catch::Matchers::Contains;
using dtensor::testing::expected_index_local;
using dtensor::testing::SharedTempDir;
using dtensor::testing::write_index_npy;

namespace {

// Writes on rank 0 and waits until every rank can read the file.
void write_shared(const std::string& path, const Shape& shape, const std::string& descr) {
  if (get_rank() == 0) write_index_npy(path, shape, descr);
  world()->barrier();
}

// Element i of the wide array: 2^62 + 3 i - 1 (not a float's integer).
std::int64_t wide(std::int64_t i) {
  return (std::int64_t{1} << 62) + 3 * i - 1;
}

// An '<i8' array of `shape` whose element i is wide(i): written as the index
// array, its data then overwritten in place (the header is the writer's).
void write_wide_shared(const std::string& path, const Shape& shape) {
  if (get_rank() == 0) {
    write_index_npy(path, shape, "<i8");
    const std::int64_t n = shape_numel(shape);
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-8 * n, std::ios::end);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t v = wide(i);
      f.write(reinterpret_cast<const char*>(&v), 8);
    }
  }
  world()->barrier();
}

// The loaded i64 local tensor holds f(global index) at each element.
template <typename F>
void require_integers(const DTensor& loaded, F&& f) {
  INFO(loaded.spec().str() << " on rank " << get_rank());
  REQUIRE(loaded.dtype() == DType::I64);
  const Tensor index = expected_index_local(loaded.spec());  // global indices, as F64
  const Tensor got = loaded.to_local().contiguous();
  REQUIRE(got.shape() == index.shape());
  for (std::int64_t l = 0; l < got.numel(); ++l)
    REQUIRE(got.data<std::int64_t>()[l] == f(static_cast<std::int64_t>(index.data<double>()[l])));
}

}  // namespace

DTENSOR_TEST_CASE("npy i64: integer arrays load as i64 sharded, exactly P=2", "[data][dtype][mp]",
                  2) {
  SharedTempDir dir("npy-i64-two");
  DeviceMesh mesh(DeviceType::CPU, {2});
  int k = 0;
  const auto same = [](std::int64_t i) { return i; };
  for (const std::string descr : {"<i8", "<i4"})
    for (const Shape& shape : {Shape{7, 3}, Shape{5, 9, 2}, Shape{1, 3}})
      for (const Placements& p :
           {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Replicate()}}) {
        const std::string path = dir / ("a" + std::to_string(k++) + ".npy");
        write_shared(path, shape, descr);
        require_integers(data::load_npy_sharded(path, mesh, p, {.dtype = DType::I64}), same);
        // Without a dtype, integers still load as F64 values.
        CHECK(data::load_npy_sharded(path, mesh, p).dtype() == DType::F64);
      }
  write_wide_shared(dir / "wide.npy", {9, 2});
  for (const Placements& p : {Placements{Shard(0)}, Placements{Replicate()}})
    require_integers(data::load_npy_sharded(dir / "wide.npy", mesh, p, {.dtype = DType::I64}),
                     wide);
  // A float array has no integers to give: every rank refuses, naming the file.
  write_shared(dir / "f.npy", {4, 2}, "<f4");
  REQUIRE_THROWS_WITH(
      data::load_npy_sharded(dir / "f.npy", mesh, {Shard(0)}, {.dtype = DType::I64}),
      Contains(dir / "f.npy") && Contains("i64"));
}

DTENSOR_TEST_CASE("npy i64: a 2x2 mesh and four ranks, uneven and empty shards P=4",
                  "[data][dtype][mp]", 4) {
  SharedTempDir dir("npy-i64-four");
  write_wide_shared(dir / "wide.npy", {5, 3});
  for (const Shape& mesh_shape : {Shape{2, 2}, Shape{4}}) {
    DeviceMesh mesh(DeviceType::CPU, mesh_shape);
    const Placements p = mesh_shape.size() == 2 ? Placements{Shard(0), Shard(1)}
                                                : Placements{Shard(1)};  // 3 over 4: one empty
    require_integers(data::load_npy_sharded(dir / "wide.npy", mesh, p, {.dtype = DType::I64}),
                     wide);
  }
}

DTENSOR_TEST_CASE("npy i64: read_npy with a dtype P=1", "[data][dtype]", 1) {
  SharedTempDir dir("npy-i64-one");
  write_wide_shared(dir / "wide.npy", {3, 4});
  const Tensor t = data::read_npy(dir / "wide.npy", DType::I64);
  REQUIRE(t.dtype() == DType::I64);
  REQUIRE(t.shape() == Shape{3, 4});
  for (std::int64_t i = 0; i < t.numel(); ++i)
    REQUIRE(t.data<std::int64_t>()[i] == wide(i));
  write_shared(dir / "i4.npy", {6}, "<i4");
  const Tensor w = data::read_npy(dir / "i4.npy", DType::I64);
  for (std::int64_t i = 0; i < 6; ++i)
    REQUIRE(w.data<std::int64_t>()[i] == i);
  CHECK(data::read_npy(dir / "i4.npy").dtype() == DType::F64);
  CHECK(data::read_npy(dir / "i4.npy", DType::F32).dtype() == DType::F32);
  write_shared(dir / "f.npy", {2}, "<f8");
  CHECK_THROWS_WITH(data::read_npy(dir / "f.npy", DType::I64),
                    Contains(dir / "f.npy") && Contains("i64"));
}
