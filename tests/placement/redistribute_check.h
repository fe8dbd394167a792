// One redistribute transition checked on this rank against the layout oracle
// (redistribute_oracle.h): shared by the Gloo tests (redistribute_tests.cpp)
// and the same checks under MPI (tests/mpi).
#pragma once

#include "dtensor/core/device_mesh.h"
#include "dtensor/placement/placement.h"

namespace dtensor::testing {

/// src -> dst of an integer tensor of `gshape`: the local result is exactly
/// the oracle's, the full tensor is the original, the input is untouched, and
/// (without Partial in src) going back gives the original local tensor.
void check_transition(const DeviceMesh& mesh, const Shape& gshape, DType dtype,
                      const Placements& src, const Placements& dst);

/// Whether src -> dst is refused (Shard -> Partial).
bool is_error_pair(const Placements& src, const Placements& dst);

/// The refused transition raises InvalidArgument saying "not supported".
void check_error_pair(const DeviceMesh& mesh, const Shape& gshape, const Placements& src,
                      const Placements& dst);

}  // namespace dtensor::testing
