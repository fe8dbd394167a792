// The multi-process harness lives in testing/ (the dtensor_testing library,
// shared with users' tests); this name stays so that the tests' includes do.
#pragma once

#include "testing/multiprocess.h"
