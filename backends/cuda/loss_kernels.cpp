// The CUDA kernels of the losses' slots (dtensor/ops/kernels/loss.h) for
// f32, f64, bf16 and f16. A forward's sum is kLossBlocks f64 partial sums on
// the device, copied to the host (synchronising the library's stream) and
// added there in block order into the 0-d f64 CPU tensor of the contract.
#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/loss.h"
#include "backends/cuda/module_registration.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/loss.h"

namespace dtensor::cuda_backend {
namespace {

// The device's block sums, added on the host in block order.
void put_sum(const Tensor& out, const Tensor& partials, const char* slot) {
  double total = 0;
  for (double v : download_f64(partials))
    total += v;
  kernels::put_loss_sum(out, total, slot);
}

// [N, C, S]: samples, classes, positions per class.
struct Classes {
  std::int64_t n = 0, c = 0, s = 0;
  explicit Classes(const Shape& shape)
      : n(shape.at(0)),
        c(shape.at(1)),
        s(shape_numel(shape) / std::max<std::int64_t>(shape.at(0) * shape.at(1), 1)) {}
};

void run_mse(const kernels::MseLossArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kMseLoss.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Tensor partials = Tensor::empty({kLossBlocks}, DType::F64, a.input.device());
  check_cuda(launch_mse_partials(elem_type_of(a.input.dtype()), a.input.data_ptr(),
                                 a.target.data_ptr(), a.input.numel(),
                                 static_cast<double*>(partials.data_ptr()), stream_for(dev)),
             "loss.mse kernel");
  put_sum(a.sum, partials, kernels::kMseLoss.name);
}

void run_mse_backward(const kernels::MseLossBackwardArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kMseLossBackward.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  check_cuda(
      launch_mse_backward(elem_type_of(a.input.dtype()), a.input.data_ptr(), a.target.data_ptr(),
                          a.scale, a.grad_input.data_ptr(), a.input.numel(), stream_for(dev)),
      "loss.mse_backward kernel");
}

void run_cross_entropy(const kernels::CrossEntropyArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kCrossEntropy.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Classes k(a.input.shape());
  const Tensor partials = Tensor::empty({kLossBlocks}, DType::F64, a.input.device());
  check_cuda(launch_cross_entropy_partials(
                 elem_type_of(a.input.dtype()), a.input.data_ptr(), a.target.data_ptr(), k.n, k.c,
                 k.s, static_cast<double*>(partials.data_ptr()), stream_for(dev)),
             "loss.cross_entropy kernel");
  put_sum(a.sum, partials, kernels::kCrossEntropy.name);
}

void run_cross_entropy_backward(const kernels::CrossEntropyBackwardArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kCrossEntropyBackward.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Classes k(a.input.shape());
  check_cuda(launch_cross_entropy_backward(elem_type_of(a.input.dtype()), a.input.data_ptr(),
                                           a.target.data_ptr(), a.scale, a.grad_input.data_ptr(),
                                           k.n, k.c, k.s, stream_for(dev)),
             "loss.cross_entropy_backward kernel");
}

void run_cross_entropy_indices(const kernels::CrossEntropyIndicesArgs& a) {
  const char* slot = kernels::kCrossEntropyIndices.name;
  kernels::check_class_index_target(a.input, a.target, slot);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Tensor x = a.input.contiguous();
  const Classes k(x.shape());
  const Tensor partials = Tensor::empty({kLossBlocks}, DType::F64, x.device());
  check_cuda(launch_cross_entropy_indices_partials(
                 elem_type_of(x.dtype()), x.data_ptr(), a.target.data<std::int64_t>(), k.n, k.c,
                 k.s, a.ignore_index, a.label_smoothing, static_cast<double*>(partials.data_ptr()),
                 stream_for(dev)),
             "loss.cross_entropy_indices kernel");
  put_sum(a.sum, partials, slot);
}

void run_cross_entropy_indices_backward(const kernels::CrossEntropyIndicesBackwardArgs& a) {
  kernels::check_class_index_target(a.input, a.target, kernels::kCrossEntropyIndicesBackward.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Tensor x = a.input.contiguous();
  const Classes k(x.shape());
  check_cuda(launch_cross_entropy_indices_backward(elem_type_of(x.dtype()), x.data_ptr(),
                                                   a.target.data<std::int64_t>(), k.n, k.c, k.s,
                                                   a.ignore_index, a.label_smoothing, a.scale,
                                                   a.grad_input.data_ptr(), stream_for(dev)),
             "loss.cross_entropy_indices_backward kernel");
}

void run_class_index_count(const kernels::ClassIndexCountArgs& a) {
  kernels::check_class_index_count(a);
  const int dev = a.target.device().index;
  DeviceGuard guard(dev);
  const Tensor counts = Tensor::empty({4}, DType::F64, a.target.device());
  check_cuda(launch_class_index_count(a.target.data<std::int64_t>(), a.target.numel(), a.classes,
                                      a.ignore_index, static_cast<double*>(counts.data_ptr()),
                                      stream_for(dev)),
             "loss.class_index_count kernel");
  const std::vector<double> host = download_f64(counts);
  std::copy(host.begin(), host.end(), Tensor(a.counts).data<double>());
}

void run_pointwise_loss(const kernels::PointwiseLossArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kPointwiseLoss.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const Tensor partials = Tensor::empty({kLossBlocks}, DType::F64, a.input.device());
  check_cuda(
      launch_pointwise_loss_partials(elem_type_of(a.input.dtype()), a.loss, a.input.data_ptr(),
                                     a.target.data_ptr(), a.param, a.input.numel(),
                                     static_cast<double*>(partials.data_ptr()), stream_for(dev)),
      "loss.pointwise kernel");
  put_sum(a.sum, partials, kernels::kPointwiseLoss.name);
}

void run_pointwise_loss_backward(const kernels::PointwiseLossBackwardArgs& a) {
  kernels::check_target_shape(a.input, a.target, kernels::kPointwiseLossBackward.name);
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  check_cuda(launch_pointwise_loss_backward(
                 elem_type_of(a.input.dtype()), a.loss, a.input.data_ptr(), a.target.data_ptr(),
                 a.param, a.scale, a.grad_input.data_ptr(), a.input.numel(), stream_for(dev)),
             "loss.pointwise_backward kernel");
}

}  // namespace

void register_loss_kernels() {
  const auto cuda = DeviceType::CUDA;
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel(kernels::kMseLoss, cuda, dt, KernelFunction<kernels::MseLossArgs>(run_mse));
    register_kernel(kernels::kMseLossBackward, cuda, dt,
                    KernelFunction<kernels::MseLossBackwardArgs>(run_mse_backward));
    register_kernel(kernels::kCrossEntropy, cuda, dt,
                    KernelFunction<kernels::CrossEntropyArgs>(run_cross_entropy));
    register_kernel(kernels::kCrossEntropyBackward, cuda, dt,
                    KernelFunction<kernels::CrossEntropyBackwardArgs>(run_cross_entropy_backward));
    register_kernel(kernels::kCrossEntropyIndices, cuda, dt,
                    KernelFunction<kernels::CrossEntropyIndicesArgs>(run_cross_entropy_indices));
    register_kernel(kernels::kCrossEntropyIndicesBackward, cuda, dt,
                    KernelFunction<kernels::CrossEntropyIndicesBackwardArgs>(
                        run_cross_entropy_indices_backward));
    register_kernel(kernels::kPointwiseLoss, cuda, dt,
                    KernelFunction<kernels::PointwiseLossArgs>(run_pointwise_loss));
    register_kernel(
        kernels::kPointwiseLossBackward, cuda, dt,
        KernelFunction<kernels::PointwiseLossBackwardArgs>(run_pointwise_loss_backward));
  }
  register_kernel(kernels::kClassIndexCount, cuda, DType::I64,
                  KernelFunction<kernels::ClassIndexCountArgs>(run_class_index_count));
}

}  // namespace dtensor::cuda_backend
