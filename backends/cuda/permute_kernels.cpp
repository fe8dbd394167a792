// The layout.permute slot (dtensor/ops/kernels/permute.h) on CUDA tensors of
// every dtype: a permutation is a strided copy, so it runs the device copy
// kernel (elementwise.cu) reading the input through permuted strides.
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/permute.h"

namespace dtensor::cuda_backend {
namespace {

void run_permute(const kernels::PermuteArgs& a) {
  const char* slot = kernels::kPermute.name;
  const Shape& in = a.input.shape();
  DTENSOR_CHECK_ARG(a.input.is_contiguous() && a.output.is_contiguous() &&
                        a.order.size() == in.size() && a.output.dim() == a.input.dim(),
                    slot, "internal: a contiguous {}-d input and output and order of {}", in.size(),
                    a.order.size());
  const Shape in_strides = contiguous_strides(in);
  Shape src_strides(in.size());
  for (std::size_t k = 0; k < in.size(); ++k) {
    const auto d = static_cast<std::size_t>(a.order[k]);
    DTENSOR_CHECK_ARG(d < in.size() && a.output.shape()[k] == in[d], slot,
                      "internal: output {} is not input {} permuted", shape_str(a.output.shape()),
                      shape_str(in));
    src_strides[k] = in_strides[d];
  }
  if (a.output.numel() == 0) return;
  const int dev = a.input.device().index;
  DeviceGuard guard(dev);
  const ElemType t = elem_type_of(a.input.dtype());
  check_cuda(
      launch_copy(a.output.data_ptr(), t, a.input.data_ptr(), t,
                  make_layout(a.output.shape(), contiguous_strides(a.output.shape()), src_strides),
                  stream_for(dev)),
      "layout.permute kernel");
}

}  // namespace

// Registration only: no CUDA call happens while the module loads.
void register_permute_kernels() {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    register_kernel(kernels::kPermute, DeviceType::CUDA, dt,
                    KernelFunction<kernels::PermuteArgs>(run_permute));
}

}  // namespace dtensor::cuda_backend
