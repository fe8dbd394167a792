// Run-time test registration lives in testing/ (the dtensor_testing library);
// this name stays so that the tests' includes do.
#pragma once

#include "testing/registration.h"
