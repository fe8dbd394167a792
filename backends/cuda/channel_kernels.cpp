// The CUDA kernels of the per-channel slots (dtensor/ops/kernels/channel.h)
// for f32, f64, bf16 and f16. The sums are per (n, c) row on the device and
// added per channel on the host in row order, as the CPU kernel does, into
// the f64 CPU tensor the contract asks for.
#include <algorithm>
#include <vector>

#include "backends/cuda/channel.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "dtensor/ops/kernels/channel.h"

namespace dtensor::cuda_backend {
namespace {

struct Rows {
  std::int64_t n = 0, c = 0, inner = 0;
  explicit Rows(const Tensor& t)
      : n(t.size(0)), c(t.size(1)), inner(t.numel() / std::max<std::int64_t>(n * c, 1)) {}
};

void run_add_bias(const kernels::ChannelBiasArgs& a) {
  if (a.y.numel() == 0) return;
  const int dev = a.y.device().index;
  DeviceGuard guard(dev);
  const Rows r(a.y);
  check_cuda(launch_channel_add_bias(elem_type_of(a.y.dtype()), a.y.data_ptr(), a.bias.data_ptr(),
                                     r.n * r.c, r.c, r.inner, stream_for(dev)),
             "channel.add_bias kernel");
}

void run_sums(const kernels::ChannelSumsArgs& a) {
  const Rows r(a.x);
  double* sums = a.sums.data<double>();
  std::fill(sums, sums + r.c, 0.0);
  if (a.x.numel() == 0) return;
  const int dev = a.x.device().index;
  DeviceGuard guard(dev);
  const Tensor per_row = Tensor::empty({r.n * r.c}, DType::F64, a.x.device());
  check_cuda(launch_row_sums(elem_type_of(a.x.dtype()), a.x.data_ptr(), r.n * r.c, r.inner,
                             static_cast<double*>(per_row.data_ptr()), stream_for(dev)),
             "channel.sums kernel");
  const std::vector<double> v = download_f64(per_row);
  for (std::int64_t row = 0; row < r.n * r.c; ++row)
    sums[row % r.c] += v[static_cast<std::size_t>(row)];
}

}  // namespace

void register_channel_kernels() {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel(kernels::kChannelBias, DeviceType::CUDA, dt,
                    KernelFunction<kernels::ChannelBiasArgs>(run_add_bias));
    register_kernel(kernels::kChannelSums, DeviceType::CUDA, dt,
                    KernelFunction<kernels::ChannelSumsArgs>(run_sums));
  }
}

}  // namespace dtensor::cuda_backend
