// dtensor's element types and reductions as MPI datatypes and operations.
// bfloat16 and float16 travel as 16-bit words and are reduced by our own
// MPI_Ops (combined in float, as under Gloo); Avg is a Sum the caller divides.
#pragma once

#include <mpi.h>

#include "dtensor/core/dtype.h"
#include "dtensor/core/process_group.h"

namespace dtensor::mpi_backend {

MPI_Datatype mpi_datatype(DType t);
/// The MPI_Op for `op` over `t` (Avg: the Sum). Call with mpi_lock() held
/// (the 16-bit operations are created on first use).
MPI_Op mpi_op(ReduceOp op, DType t);

}  // namespace dtensor::mpi_backend
