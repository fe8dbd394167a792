// CUDA runtime and cuDNN status codes -> libdtensor's typed errors. Private to
// backends/cuda and backends/nccl (nothing else includes CUDA headers).
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string_view>

namespace dtensor::cuda_backend {

/// The library error a failure becomes (see dtensor/core/errors.h).
enum class ErrorKind {
  InvalidArgument,  // the caller's request is malformed (InvalidArgument)
  NotSupported,     // no driver / device / kernel image / unsupported config (NotSupported)
  OutOfMemory,      // device memory exhausted (Error, message says so)
  Comm,             // a communication failure: peer, network, remote error (CommError)
  Internal,         // anything else (Error)
};

ErrorKind classify_cuda_error(cudaError_t e);
ErrorKind classify_cudnn_status(cudnnStatus_t s);

/// Throws the error of `kind` from `component`, message "<what>: <detail>".
[[noreturn]] void throw_error(ErrorKind kind, std::string_view component, std::string_view what,
                              std::string_view detail);

/// Throws unless e == cudaSuccess (and clears the runtime's sticky last error).
void check_cuda(cudaError_t e, std::string_view what);
void check_cudnn(cudnnStatus_t s, std::string_view what);

}  // namespace dtensor::cuda_backend
