#include "backends/cuda/cuda_errors.h"

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor::cuda_backend {

ErrorKind classify_cuda_error(cudaError_t e) {
  switch (e) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return ErrorKind::InvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorDevicesUnavailable:
      return ErrorKind::NotSupported;
    case cudaErrorMemoryAllocation:
      return ErrorKind::OutOfMemory;
    default:
      return ErrorKind::Internal;
  }
}

ErrorKind classify_cudnn_status(cudnnStatus_t s) {
  // cuDNN 9 groups its codes by thousands: 2xxx bad parameter, 3xxx not
  // supported, 4xxx internal (4004: device allocation), 5xxx execution failed.
  const int code = static_cast<int>(s);
  if (s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) return ErrorKind::OutOfMemory;
  if (code >= 2000 && code < 3000) return ErrorKind::InvalidArgument;
  if (code >= 3000 && code < 4000) return ErrorKind::NotSupported;
  return ErrorKind::Internal;
}

void throw_error(ErrorKind kind, std::string_view component, std::string_view what,
                 std::string_view detail) {
  const std::string msg = fmt::format("{}: {}", what, detail);
  switch (kind) {
    case ErrorKind::InvalidArgument:
      throw InvalidArgument(component, msg);
    case ErrorKind::NotSupported:
      throw NotSupported(component, msg);
    case ErrorKind::OutOfMemory:
      throw Error(component, msg + " (out of device memory)");
    case ErrorKind::Comm:
      throw CommError(component, msg);
    case ErrorKind::Internal:
      break;
  }
  throw Error(component, msg);
}

void check_cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear it, so the next call does not report it again
  throw_error(classify_cuda_error(e), "cuda", what,
              fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e)));
}

void check_cudnn(cudnnStatus_t s, std::string_view what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw_error(classify_cudnn_status(s), "cudnn", what,
              fmt::format("{} (status {})", cudnnGetErrorString(s), static_cast<int>(s)));
}

}  // namespace dtensor::cuda_backend
