// load_safetensors_sharded: one tensor of a file written by
// write_safetensors, loaded sharded against the whole, and its errors.
#include "tests/data/data_test_support.h"

using namespace dtensor;
using Catch::Matchers::Contains;
using dtensor::testing::require_index_local;
using dtensor::testing::SharedTempDir;

namespace {

Tensor index_tensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::F64);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = static_cast<double>(i);
  return t.to(dtype);
}

}  // namespace

DTENSOR_TEST_CASE("a safetensors tensor loads sharded on a 2x2 mesh P=4", "[data][mp]", 4) {
  SharedTempDir dir("st-four");
  DeviceMesh mesh(DeviceType::CPU, {2, 2});
  const std::string path = dir / "w.safetensors";
  if (get_rank() == 0)
    write_safetensors(path, {{"a", index_tensor({5, 6, 3}, DType::F32)},
                             {"b", index_tensor({7, 2}, DType::BF16)},
                             {"c", index_tensor({4, 9}, DType::F64)}});
  world()->barrier();
  for (const Placements& p : {Placements{Shard(0), Shard(1)}, Placements{Shard(1), Shard(1)},
                              Placements{Replicate(), Shard(0)}}) {
    const DTensor a = data::load_safetensors_sharded(path, "a", mesh, p);
    CHECK(a.dtype() == DType::F32);
    require_index_local(a);
    const DTensor b = data::load_safetensors_sharded(path, "b", mesh, p);
    CHECK(b.dtype() == DType::BF16);
    require_index_local(b);
    data::LoadStats stats;
    const DTensor c =
        data::load_safetensors_sharded(path, "c", mesh, p, {.dtype = DType::F32, .stats = &stats});
    CHECK(c.dtype() == DType::F32);
    CHECK(stats.bytes_read == shape_numel(c.to_local().shape()) * 8);
    require_index_local(c);
  }
  REQUIRE_THROWS_WITH(data::load_safetensors_sharded(path, "d", mesh, {Shard(0), Shard(1)}),
                      Contains(path) && Contains("no tensor 'd'") && Contains("a, b, c"));
  REQUIRE_THROWS_AS(data::load_safetensors_sharded(dir / "none", "a", mesh, {Shard(0), Shard(1)}),
                    InvalidArgument);
  REQUIRE_THROWS_WITH(data::load_safetensors_sharded(path, "a", mesh, {Partial(), Shard(1)}),
                      Contains("placements"));
  if (get_rank() == 0) std::ofstream(dir / "bad.safetensors") << "short";
  world()->barrier();
  REQUIRE_THROWS_AS(
      data::load_safetensors_sharded(dir / "bad.safetensors", "a", mesh, {Shard(0), Shard(1)}),
      CheckpointCorrupt);
}
