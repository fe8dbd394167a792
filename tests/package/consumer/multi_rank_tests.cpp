// A user's multi-rank tests, built against the installed package: the binary
// links dtensor::testing (pkg-config: dtensor-testing) and nothing else. No
// main (the library has Catch2's) and no find_package(Catch2) in the project.
#include <dtensor/dtensor.h>
#include <dtensor/testing.h>

DTENSOR_TEST_CASE("a tensor sharded over 2 ranks gathers back whole", "[consumer]", 2) {
  using namespace dtensor;
  DeviceMesh mesh(DeviceType::CPU, {get_world_size()});
  const Tensor t = Tensor::rand({4, 6}, DType::F64, 7);
  DTensor d = distribute_tensor(t, mesh, {Shard(1)});
  REQUIRE(d.to_local().shape() == Shape{4, 3});
  REQUIRE(max_abs_diff(d.full_tensor(), t) == 0.0);
}

DTENSOR_TEST_CASE("an all-reduce over 3 ranks sums the ranks", "[consumer]", 3) {
  using namespace dtensor;
  Tensor t = Tensor::full({1}, get_rank() + 1.0, DType::F64);
  world()->allreduce(t);
  REQUIRE(t.item_flat(0) == 6.0);
}
