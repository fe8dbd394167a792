// The linear.forward and linear.backward slots (dtensor/ops/kernels/linear.h)
// on CUDA tensors: the products are cuBLAS GEMMs on the library's stream
// (f64 in f64; f32 in f32 without TF32, which would break f32 tolerances, as
// for cuDNN; bf16 and f16 with f32 accumulation, tensor cores allowed), the bias rows a strided copy
// and the bias gradient a column sum (the reduction kernel of reduce.cu).
//
// The tensors are row-major and cuBLAS is column-major, so each product is
// computed transposed: out^T [K, M] = weight [K, in] x input^T [in, M] reads
// the row-major weight as the column-major weight^T, and so on.
#include <cublas_v2.h>
#include <fmt/format.h>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/reduce.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/linear.h"

namespace dtensor::cuda_backend {
namespace {

void check_cublas(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const ErrorKind kind = s == CUBLAS_STATUS_ALLOC_FAILED    ? ErrorKind::OutOfMemory
                         : s == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorKind::NotSupported
                         : s == CUBLAS_STATUS_INVALID_VALUE ? ErrorKind::InvalidArgument
                                                            : ErrorKind::Internal;
  throw_error(kind, "cublas", what,
              fmt::format("{} (status {})", cublasGetStatusString(s), static_cast<int>(s)));
}

cublasHandle_t handle_for(int device) {
  static PerDevice<cublasHandle_t> handles;
  return handles.get(device, [](int d) {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), fmt::format("cublasCreate on cuda:{}", d));
    check_cublas(cublasSetStream(h, stream_for(d)), "cublasSetStream");
    // The default math mode: CUBLAS_COMPUTE_32F then computes f32 in f32 (no
    // TF32, which only CUBLAS_TF32_TENSOR_OP_MATH or *_FAST_TF32 would allow).
    check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return h;
  });
}

// C [m x n] = alpha op(A) op(B) + beta C, column-major, for the dtype of the
// operands (all one dtype).
void gemm(int dev, DType dt, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
          std::int64_t k, const void* a, std::int64_t lda, const void* b, std::int64_t ldb,
          double beta, void* c, std::int64_t ldc, const char* what) {
  if (m == 0 || n == 0) return;
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (dt) {
    case DType::F64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      break;
    case DType::BF16:
      type = CUDA_R_16BF;
      break;
    case DType::F16:
      type = CUDA_R_16F;
      break;
    default:
      break;
  }
  const double alpha64 = 1.0;
  const float alpha32 = 1.0F, beta32 = static_cast<float>(beta);
  const bool f64 = dt == DType::F64;
  check_cublas(
      cublasGemmEx(handle_for(dev), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                   static_cast<int>(k), f64 ? static_cast<const void*>(&alpha64) : &alpha32, a,
                   type, static_cast<int>(lda), b, type, static_cast<int>(ldb),
                   f64 ? static_cast<const void*>(&beta) : &beta32, c, type, static_cast<int>(ldc),
                   compute, CUBLAS_GEMM_DEFAULT),
      what);
}

void forward(const kernels::LinearArgs& a) {
  const std::int64_t m = a.input.shape().at(0), in = a.input.shape().at(1);
  const std::int64_t k = a.weight.shape().at(0);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const DType dt = a.input.dtype();
  double beta = 0;
  if (a.bias.defined() && a.output.numel() > 0) {
    // Every row of the output starts as the bias (a copy reading it with row
    // stride 0); the product is added to it.
    const ElemType t = elem_type_of(dt);
    check_cuda(launch_copy(a.output.data_ptr(), t, a.bias.data_ptr(), t,
                           make_layout({m, k}, {k, 1}, {0, 1}), stream_for(dev)),
               "linear.forward bias");
    beta = 1;
  }
  if (in == 0) {
    if (!a.bias.defined()) Tensor(a.output).zero_();
    return;
  }
  gemm(dev, dt, true, false, k, m, in, a.weight.data_ptr(), in, a.input.data_ptr(), in, beta,
       a.output.data_ptr(), k, "linear.forward gemm");
}

void backward(const kernels::LinearBackwardArgs& a) {
  const std::int64_t m = a.input.shape().at(0), in = a.input.shape().at(1);
  const std::int64_t k = a.weight.shape().at(0);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const DType dt = a.input.dtype();
  if (a.grad_input.defined()) {
    if (k == 0)
      Tensor(a.grad_input).zero_();
    else
      gemm(dev, dt, false, false, in, m, k, a.weight.data_ptr(), in, a.grad_output.data_ptr(), k, 0,
           a.grad_input.data_ptr(), in, "linear.backward grad_input gemm");
  }
  if (a.grad_weight.defined()) {
    if (m == 0)
      Tensor(a.grad_weight).zero_();
    else
      gemm(dev, dt, false, true, in, k, m, a.input.data_ptr(), in, a.grad_output.data_ptr(), k, 0,
           a.grad_weight.data_ptr(), in, "linear.backward grad_weight gemm");
  }
  if (a.grad_bias.defined()) {
    // The column sums of grad_output [M, K]: dim 0 reduced.
    const ReduceLayout L = make_reduce_layout({m, k}, {true, false}, "linear.backward");
    check_cuda(launch_reduce_fold(ReduceFold::Sum, elem_type_of(dt), a.grad_output.data_ptr(),
                                  a.grad_bias.data_ptr(), L, 1.0, stream_for(dev)),
               "linear.backward grad_bias");
  }
}

}  // namespace

// Registration only: no CUDA call happens while the module loads.
void register_linear_kernels() {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel(kernels::kLinear, DeviceType::CUDA, dt,
                    KernelFunction<kernels::LinearArgs>(forward));
    register_kernel(kernels::kLinearBackward, DeviceType::CUDA, dt,
                    KernelFunction<kernels::LinearBackwardArgs>(backward));
  }
}

}  // namespace dtensor::cuda_backend
