// Registers Catch2 test cases whose names are computed at run time, for
// parameterised tests ("redistribute S(0)->R uneven P=3", one per case), so
// ctest lists and runs each case on its own and a failure names its case.
#pragma once

#include <functional>
#include <string>

namespace dtensor::testing {

/// Call from a static initialiser (see DTENSOR_TEST_REGISTRAR). Names must be unique.
void register_test(const std::string& name, const std::string& tags, std::function<void()> body);

}  // namespace dtensor::testing

#define DTENSOR_TEST_CONCAT2(a, b) a##b
#define DTENSOR_TEST_CONCAT(a, b) DTENSOR_TEST_CONCAT2(a, b)
/// DTENSOR_TEST_REGISTRAR { register_test(...); ... } runs at start-up.
#define DTENSOR_TEST_REGISTRAR                                         \
  static void DTENSOR_TEST_CONCAT(dtensor_registrar_fn_, __LINE__)();  \
  static const int DTENSOR_TEST_CONCAT(dtensor_registrar_, __LINE__) = \
      (DTENSOR_TEST_CONCAT(dtensor_registrar_fn_, __LINE__)(), 0);     \
  static void DTENSOR_TEST_CONCAT(dtensor_registrar_fn_, __LINE__)()
