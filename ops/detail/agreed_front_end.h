// A front end's own checks (expanding parameter lists, say) run before
// dispatch's agreement check. A rank whose arguments fail them must not
// raise alone: the others would go on into that agreement check and wait
// there until the timeout. So a failing rank takes part in one agreement
// check of its own, with its error as the fingerprint (agree_before_failing:
// what dispatch does first, so the checks pair up and the call numbers stay
// in step): every rank raises, with the same error when all failed alike and
// "ranks disagree" otherwise.
#pragma once

#include <functional>
#include <string>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"

namespace dtensor::detail {

template <typename F>
auto agreed_front_end(const DeviceMesh& mesh, const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InvalidArgument& e) {
    agree_before_failing(mesh, std::hash<std::string>()(e.what()), op, e.what());
    throw;
  }
}

}  // namespace dtensor::detail
