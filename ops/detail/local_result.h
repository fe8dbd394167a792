// Checks every operator handler makes the same way: that its inputs live
// where its local kernels run, and that the local result it wraps has the
// shape the propagator's output spec says (a mismatch is the library's bug,
// named as such).
#pragma once

#include "dtensor/core/errors.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor::detail {

/// InvalidArgument naming "input" when `x` is not on the CPU.
inline void require_cpu(const DTensor& x, const char* op) {
  check_arg(x.to_local().device().type == DeviceType::CPU, op,
            "input: {} runs on CPU tensors (this one is on {})", op, x.to_local().device().str());
}

/// `local` wrapped with `spec`, after checking its shape against the spec's.
inline DTensor wrap_checked(const Tensor& local, const DTensorSpec& spec, const char* op) {
  check_arg(local.shape() == spec.local_shape(), op,
            "internal: local result {} but the spec {} needs {}", shape_str(local.shape()),
            spec.str(), shape_str(spec.local_shape()));
  return DTensor(local, spec);
}

}  // namespace dtensor::detail
