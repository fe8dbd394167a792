// A user's test binary: DTENSOR_TEST_CASEs, linked with dtensor::testing only
// (no main of its own). test_case_tests.cpp runs it and checks what it does;
// ctest does not run it directly, since some of its cases fail on purpose.
#include <dtensor/dtensor.h>
#include <dtensor/testing.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace {
// What a rank does when its peer failed: wait for it (in a collective, in a
// real test) far longer than the harness may take to stop the job.
void wait_for_a_peer_that_is_gone() {
  std::this_thread::sleep_for(std::chrono::seconds(50));
}
}  // namespace

DTENSOR_TEST_CASE("every rank sees a world of 3", "[pass]", 3) {
  REQUIRE(dtensor::get_world_size() == 3);
  dtensor::Tensor t = dtensor::Tensor::full({1}, dtensor::get_rank() + 1.0, dtensor::DType::F64);
  dtensor::world()->allreduce(t);
  REQUIRE(t.item_flat(0) == 6.0);
}

DTENSOR_TEST_CASE("the ranks inherit the environment", "[pass]", 2) {
  const char* mark = std::getenv("DTENSOR_FIXTURE_MARK");
  REQUIRE(mark != nullptr);
  REQUIRE(std::string(mark) == "inherited");
}

DTENSOR_TEST_CASE("a REQUIRE fails on rank 1 of 3", "[fail]", 3) {
  const int answer = 41 + dtensor::get_rank();
  if (dtensor::get_rank() == 1) REQUIRE(answer != 42);
  wait_for_a_peer_that_is_gone();
}

DTENSOR_TEST_CASE("rank 2 of 3 throws", "[fail]", 3) {
  if (dtensor::get_rank() == 2) throw std::runtime_error("rank 2 gave up");
  wait_for_a_peer_that_is_gone();
}

DTENSOR_TEST_CASE("a REQUIRE fails on rank 1 of 3 while the others wait for it", "[fail]", 3) {
  const int answer = 41 + dtensor::get_rank();
  if (dtensor::get_rank() == 1) REQUIRE(answer != 42);
  dtensor::world()->barrier();  // ranks 0 and 2 hear why rank 1 is gone
}
