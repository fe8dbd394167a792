// Multi-rank Catch2 test cases for code that uses dtensor (docs/testing.md).
//
//   #include <dtensor/testing.h>
//
//   DTENSOR_TEST_CASE("the world has three ranks", "[world]", 3) {
//     REQUIRE(dtensor::get_world_size() == 3);
//   }
//
// Link dtensor::testing (CMake) or dtensor-testing (pkg-config); it provides
// Catch2's main, so the test file needs no main and no other setup.
//
// Running the test binary runs each case on its own set of processes: the
// binary starts itself once per rank with a fresh rendezvous and the
// environment passed on, and each rank runs the body between
// init_process_group and destroy_process_group, so get_rank(), world() and
// everything else work in it. A failed assertion, an exception or a crash on
// any rank fails the case; the other ranks are stopped about a second later
// (they are likely waiting for the one that failed), and the report names
// every failed rank with the tail of its output. A case still running after
// 60 s is stopped and its hung ranks are named.
#pragma once

#include <catch2/catch.hpp>

#include "dtensor/core/distributed.h"

namespace dtensor::testing {

/// What DTENSOR_TEST_CASE expands to, from inside the running Catch2 test
/// case: in the test binary, starts `world_size` rank processes and, if any
/// rank fails, fails the case at `file`:`line` (the DTENSOR_TEST_CASE) with
/// the report; in a rank process, runs `body`.
void run_test_case(int world_size, void (*body)(), const char* file, int line);

}  // namespace dtensor::testing

#define DTENSOR_TESTING_CONCAT2_(a, b) a##b
#define DTENSOR_TESTING_CONCAT_(a, b) DTENSOR_TESTING_CONCAT2_(a, b)
// Users who define CATCH_CONFIG_PREFIX_ALL have CATCH_TEST_CASE only.
#ifdef CATCH_CONFIG_PREFIX_ALL
#define DTENSOR_TESTING_CATCH_TEST_CASE_ CATCH_TEST_CASE
#else
#define DTENSOR_TESTING_CATCH_TEST_CASE_ TEST_CASE
#endif
#define DTENSOR_TEST_CASE_IMPL_(name, tags, ranks, body_fn)                   \
  static void body_fn();                                                      \
  DTENSOR_TESTING_CATCH_TEST_CASE_(name, tags) {                              \
    ::dtensor::testing::run_test_case((ranks), &body_fn, __FILE__, __LINE__); \
  }                                                                           \
  static void body_fn()

/// DTENSOR_TEST_CASE("name", "[tags]", ranks) { body } : a Catch2 test case
/// whose body runs on `ranks` processes. No SECTION or GENERATE in the body:
/// the ranks run the case once.
#define DTENSOR_TEST_CASE(name, tags, ranks) \
  DTENSOR_TEST_CASE_IMPL_(name, tags, ranks, \
                          DTENSOR_TESTING_CONCAT_(dtensor_test_body_, __COUNTER__))
