// BatchIterator on a data x spatial 2x2 mesh: each batch holds this
// replica's sampler indices, keeps the spatial sharding, and its full tensor
// is the two replicas' samples one after the other.
#include "tests/data/data_test_support.h"

using namespace dtensor;
using Catch::Matchers::Contains;
using dtensor::testing::SharedTempDir;
using dtensor::testing::write_index_npy;

namespace {

// The samples `indices` of the array [N, rest...] whose element i is i, as F64.
Tensor index_samples(const std::vector<std::int64_t>& indices, const Shape& rest) {
  const std::int64_t per = shape_numel(rest);
  Shape shape{static_cast<std::int64_t>(indices.size())};
  shape.insert(shape.end(), rest.begin(), rest.end());
  Tensor t = Tensor::empty(shape, DType::F64);
  for (std::size_t j = 0; j < indices.size(); ++j)
    for (std::int64_t e = 0; e < per; ++e)
      t.data<double>()[static_cast<std::int64_t>(j) * per + e] =
          static_cast<double>(indices[j] * per + e);
  return t;
}

}  // namespace

DTENSOR_TEST_CASE("batches follow the sampler per replica and keep the spatial sharding P=4",
                  "[data][mp]", 4) {
  SharedTempDir dir("batches");
  const std::string path = dir / "x.npy";
  const Shape rest{2, 6, 4};
  if (get_rank() == 0) write_index_npy(path, {10, 2, 6, 4}, "<f4");
  world()->barrier();
  DeviceMesh mesh(DeviceType::CPU, {2, 2});  // dim 0: data parallel, dim 1: H
  const DTensor x = data::load_npy_sharded(path, mesh, {Replicate(), Shard(2)});
  const data::SamplerOptions options{.shuffle = true, .seed = 5};
  data::BatchIterator batches(x, 0, 3, options);
  REQUIRE(batches.num_batches() == 2);  // 5 samples per replica: 3, then 2
  const std::int64_t replica = mesh.get_coordinate()->at(0);
  for (const std::int64_t epoch : {0, 1}) {
    batches.set_epoch(epoch);
    std::vector<std::vector<std::int64_t>> mine(2);
    for (std::int64_t r = 0; r < 2; ++r) {
      data::DistributedSampler s(10, 2, r, options);
      s.set_epoch(epoch);
      mine[static_cast<std::size_t>(r)] = s.indices();
    }
    for (std::int64_t i = 0; i < 2; ++i) {
      const DTensor b = batches.batch(i);
      const std::int64_t n = i == 0 ? 3 : 2;
      CHECK(b.shape() == Shape{2 * n, 2, 6, 4});
      CHECK(b.placements() == Placements{Shard(0), Shard(2)});
      // The whole batch: replica 0's samples, then replica 1's.
      std::vector<std::int64_t> all;
      for (const auto& m : mine)
        all.insert(all.end(), m.begin() + 3 * i, m.begin() + 3 * i + n);
      const Tensor full = b.full_tensor().to(DType::F64);
      const Tensor want = index_samples(all, rest);
      REQUIRE(std::memcmp(full.data_ptr(), want.data_ptr(), want.nbytes()) == 0);
      // Locally: this replica's samples, this rank's rows of H.
      const std::vector<std::int64_t> here(
          mine[static_cast<std::size_t>(replica)].begin() + 3 * i,
          mine[static_cast<std::size_t>(replica)].begin() + 3 * i + n);
      const Tensor local = b.to_local().to(DType::F64).contiguous();
      const Tensor want_local =
          index_samples(here, rest).narrow(2, 3 * mesh.get_coordinate()->at(1), 3).contiguous();
      REQUIRE(std::memcmp(local.data_ptr(), want_local.data_ptr(), want_local.nbytes()) == 0);
    }
  }
  CHECK_THROWS_WITH(data::BatchIterator(x, 1, 3), Contains("not Replicate"));
  CHECK_THROWS_WITH(data::BatchIterator(x.redistribute(mesh, {Shard(0), Shard(2)}), 0, 3),
                    Contains("sample dim 0"));
  CHECK_THROWS_AS(data::BatchIterator(x, 0, 0), InvalidArgument);
}

DTENSOR_TEST_CASE("without a data-parallel dim every rank gets every batch P=1", "[data]", 1) {
  DeviceMesh mesh(DeviceType::CPU, {1});
  const DTensor x =
      distribute_tensor(index_samples({0, 1, 2, 3, 4}, {3}).to(DType::F32), mesh, {Replicate()});
  data::BatchIterator batches(x, std::nullopt, 2, {.shuffle = false});
  REQUIRE(batches.num_batches() == 3);
  const DTensor last = batches.batch(2);
  CHECK(last.shape() == Shape{1, 3});
  CHECK(last.placements() == Placements{Replicate()});
  const Tensor got = last.to_local().to(DType::F64);
  CHECK(got.data<double>()[0] == 12.0);
}
