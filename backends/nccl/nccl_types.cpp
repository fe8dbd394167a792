#include "backends/nccl/nccl_types.h"

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor::nccl_backend {

using cuda_backend::ErrorKind;

ErrorKind classify_nccl_result(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorKind::InvalidArgument;
    case ncclSystemError:
    case ncclRemoteError:
      return ErrorKind::Comm;
    case ncclUnhandledCudaError:
    case ncclInternalError:
    default:
      return ErrorKind::Internal;
  }
}

void check_nccl(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  cuda_backend::throw_error(
      classify_nccl_result(r), "nccl", what,
      fmt::format("{} (ncclResult {})", ncclGetErrorString(r), static_cast<int>(r)));
}

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I64:
      return ncclInt64;
  }
  throw NotSupported("nccl", "unsupported dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  throw NotSupported("nccl", "unsupported reduction");
}

}  // namespace dtensor::nccl_backend
