// A check every operator handler makes the same way: that the local result
// it wraps has the shape the propagator's output spec says (a mismatch is the
// library's bug, named as such). Where the inputs live needs no check here: a
// device without the operator's kernel is a NotSupported from the kernel
// table naming the slot, device and dtype.
#pragma once

#include "dtensor/core/errors.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor::detail {

/// `local` wrapped with `spec`, after checking its shape against the spec's.
inline DTensor wrap_checked(const Tensor& local, const DTensorSpec& spec, const char* op) {
  DTENSOR_CHECK_ARG(local.shape() == spec.local_shape(), op,
                    "internal: local result {} but the spec {} needs {}", shape_str(local.shape()),
                    spec.str(), shape_str(spec.local_shape()));
  return DTensor(local, spec);
}

}  // namespace dtensor::detail
