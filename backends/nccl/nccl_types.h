// NCCL result codes, data types and reduction ops <-> the library's.
#pragma once

#include <nccl.h>

#include <string_view>

#include "backends/cuda/cuda_errors.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/process_group.h"

namespace dtensor::nccl_backend {

cuda_backend::ErrorKind classify_nccl_result(ncclResult_t r);
/// Throws unless r is ncclSuccess or ncclInProgress (a non-blocking call that
/// was accepted; its completion is polled by the watchdog).
void check_nccl(ncclResult_t r, std::string_view what);

ncclDataType_t nccl_dtype(DType t);
ncclRedOp_t nccl_op(ReduceOp op);

}  // namespace dtensor::nccl_backend
