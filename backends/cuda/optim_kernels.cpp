// The CUDA kernels of the optimisers' slots and of gradient clipping
// (dtensor/ops/kernels/optim.h) for f32 and f64, as the CPU kernels: the same
// operand checks and scalars (optim.h) and the same element functions
// (optim_update.h), so a CUDA step does torch.optim's operations in the
// CPU's order. The norm part's block results come back to the host and are
// combined there in block order, since the contract puts it in a CPU tensor.
#include <cmath>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/optim.h"
#include "backends/cuda/pointwise.h"
#include "dtensor/ops/kernels/optim.h"

namespace dtensor::cuda_backend {
namespace {

template <typename T>
void sgd(const kernels::SgdArgs& a) {
  kernels::check_update_operands(a);
  const int dev = a.param.device().index;
  DeviceGuard guard(dev);
  check_cuda(
      launch_sgd(a.param.data<T>(), a.grad.data<T>(), kernels::state_data<T>(a.momentum_buffer),
                 a.param.numel(), kernels::sgd_scalars<T>(a), stream_for(dev)),
      "optim.sgd kernel");
}

template <typename T>
void adam(const kernels::AdamArgs& a) {
  kernels::check_update_operands(a);
  const int dev = a.param.device().index;
  DeviceGuard guard(dev);
  check_cuda(launch_adam(a.param.data<T>(), a.grad.data<T>(), a.exp_avg.data<T>(),
                         a.exp_avg_sq.data<T>(), kernels::state_data<T>(a.max_exp_avg_sq),
                         a.param.numel(), kernels::adam_scalars<T>(a), stream_for(dev)),
             "optim.adam kernel");
}

template <typename T>
void rmsprop(const kernels::RmspropArgs& a) {
  kernels::check_update_operands(a);
  const int dev = a.param.device().index;
  DeviceGuard guard(dev);
  check_cuda(
      launch_rmsprop(a.param.data<T>(), a.grad.data<T>(), a.square_avg.data<T>(),
                     kernels::state_data<T>(a.grad_avg), kernels::state_data<T>(a.momentum_buffer),
                     a.param.numel(), kernels::rmsprop_scalars<T>(a), stream_for(dev)),
      "optim.rmsprop kernel");
}

void norm_part(const kernels::NormPartArgs& a) {
  kernels::check_norm_part(a);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Tensor partials = Tensor::empty({kNormPartBlocks}, DType::F64, a.input.device());
  check_cuda(
      launch_norm_partials(elem_type_of(a.input.dtype()), a.input.data_ptr(), a.input.numel(),
                           a.norm_type, static_cast<double*>(partials.data_ptr()), stream_for(dev)),
      "optim.norm_part kernel");
  const bool max = std::isinf(a.norm_type);
  double out = 0;
  for (const double b : download_f64(partials))
    out = !max ? out + b : (std::isnan(out) || (!std::isnan(b) && b <= out) ? out : b);
  a.result.data<double>()[0] = out;
}

// In place: the pointwise scale kernel with its output its input (the scale
// rounded to the data's type first, as the CPU kernel does).
void scale_in_place(const kernels::ScaleInPlaceArgs& a) {
  check_arg(a.tensor.is_contiguous(), kernels::kScaleInPlace.name,
            "internal: the tensor is not contiguous");
  const int dev = a.tensor.device().index;
  DeviceGuard guard(dev);
  check_cuda(
      launch_pointwise(PointwiseOp::Scale, elem_type_of(a.tensor.dtype()), a.tensor.data_ptr(),
                       a.tensor.data_ptr(), nullptr, a.scale, a.tensor.numel(), stream_for(dev)),
      "optim.scale_in_place kernel");
}

template <typename T>
void register_for(DType dt) {
  const auto cuda = DeviceType::CUDA;
  register_kernel(kernels::kSgd, cuda, dt, KernelFunction<kernels::SgdArgs>(sgd<T>));
  register_kernel(kernels::kAdam, cuda, dt, KernelFunction<kernels::AdamArgs>(adam<T>));
  register_kernel(kernels::kRmsprop, cuda, dt, KernelFunction<kernels::RmspropArgs>(rmsprop<T>));
  register_kernel(kernels::kNormPart, cuda, dt, KernelFunction<kernels::NormPartArgs>(norm_part));
  register_kernel(kernels::kScaleInPlace, cuda, dt,
                  KernelFunction<kernels::ScaleInPlaceArgs>(scale_in_place));
}

}  // namespace

// Registration only: no CUDA call happens while the module loads. f32 and f64,
// the dtypes the CPU kernels (and so the optimisers) take.
void register_optim_kernels() {
  register_for<float>(DType::F32);
  register_for<double>(DType::F64);
}

}  // namespace dtensor::cuda_backend
