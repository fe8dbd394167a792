// The dropout.mask slot (dtensor/ops/kernels/dropout.h) on CUDA tensors for
// f32, f64, bf16 and f16: the same part check and the same mask as the CPU
// kernel (dropout_hash.h), so a CUDA run drops the elements a CPU run drops.
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/dropout.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/dropout.h"

namespace dtensor::cuda_backend {
namespace {

void run_dropout(const kernels::DropoutArgs& a) {
  kernels::check_dropout_part(a);
  const Tensor x = a.input.contiguous();
  const DropoutPart part = make_dropout_part(x.shape(), a.offset, a.global_shape);
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const double scale = a.p < 1.0 ? 1.0 / (1.0 - a.p) : 0.0;
  check_cuda(launch_dropout(elem_type_of(x.dtype()), x.data_ptr(), a.output.data_ptr(), part, a.key,
                            a.p, scale, stream_for(dev)),
             "dropout.mask kernel");
}

}  // namespace

DropoutPart make_dropout_part(const Shape& local, const Shape& offset, const Shape& global_shape) {
  DTENSOR_CHECK_ARG(local.size() <= static_cast<std::size_t>(kMaxKernelDims),
                    kernels::kDropout.name, "{} dims: the CUDA kernel takes at most {}",
                    local.size(), kMaxKernelDims);
  DropoutPart part;
  part.ndim = static_cast<int>(local.size());
  part.numel = shape_numel(local);
  std::int64_t stride = 1;
  for (int d = part.ndim - 1; d >= 0; --d) {
    const auto k = static_cast<std::size_t>(d);
    part.local[d] = local[k];
    part.offset[d] = offset.at(k);
    part.global_stride[d] = stride;
    stride *= global_shape.at(k);
  }
  return part;
}

// Registration only: no CUDA call happens while the module loads.
void register_dropout_kernels() {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    register_kernel(kernels::kDropout, DeviceType::CUDA, dt,
                    KernelFunction<kernels::DropoutArgs>(run_dropout));
}

}  // namespace dtensor::cuda_backend
