// The CUDA kernels of the normalisations' slots (dtensor/ops/kernels/norm.h)
// for f32, f64, bf16 and f16. The device computes each row's results
// (norm.cu); the rows are merged into statistics and parameter sums on the
// host in row order with Chan's update, exactly as the CPU kernels merge
// theirs, since the contract keeps statistics and sums as f64 CPU tensors.
// The statistics the passes read go up per call ([stats] f64, a few bytes).
#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/norm.h"
#include "dtensor/ops/kernels/norm.h"

namespace dtensor::cuda_backend {
namespace {

using kernels::NormLayout;

NormDims dims_of(const NormLayout& L) {
  NormDims d;
  d.n = L.n;
  d.c = L.c;
  d.s = L.s;
  d.stats_per_sample = L.stats_per_sample;
  d.group_size = L.group_size;
  d.elementwise_affine = L.elementwise_affine;
  return d;
}

void moments(const kernels::NormMomentsArgs& a) {
  const NormLayout& L = a.layout;
  const int dev = a.x.device().index;
  DeviceGuard guard(dev);
  const std::int64_t rows = L.n * L.c;
  double* out = a.moments.data<double>();
  std::fill(out, out + 3 * L.stats(), 0.0);
  if (rows == 0) return;
  const Tensor per_row = Tensor::empty({rows, 2}, DType::F64, a.x.device());
  const Tensor x = a.x.contiguous();  // the launch reads rows back to back
  check_cuda(launch_norm_row_moments(elem_type_of(x.dtype()), x.data_ptr(), dims_of(L),
                                     static_cast<double*>(per_row.data_ptr()), stream_for(dev)),
             "norm.moments kernel");
  const std::vector<double> r = download_f64(per_row);
  for (std::int64_t i = 0; i < rows; ++i) {
    const double row[3] = {static_cast<double>(L.s), r[static_cast<std::size_t>(2 * i)],
                           r[static_cast<std::size_t>(2 * i + 1)]};
    kernels::merge_moments_into(out + 3 * L.stat(i / L.c, i % L.c), row);
  }
}

void apply(const kernels::NormApplyArgs& a) {
  const int dev = a.x.device().index;
  DeviceGuard guard(dev);
  const Tensor mean = f64_on(a.mean, dev), invstd = f64_on(a.invstd, dev);
  check_cuda(launch_norm_apply(elem_type_of(a.x.dtype()), a.x.data_ptr(), a.y.data_ptr(),
                               dims_of(a.layout), f64_or_null(mean), f64_or_null(invstd),
                               ptr_or_null(a.weight), ptr_or_null(a.bias), a.relu, stream_for(dev)),
             "norm.apply kernel");
}

void backward_reduce(const kernels::NormBackwardReduceArgs& a) {
  const NormLayout& L = a.layout;
  const int dev = a.x.device().index;
  DeviceGuard guard(dev);
  const std::int64_t rows = L.n * L.c;
  double* out = a.packed.data<double>();
  std::fill(out, out + 5 * L.stats(), 0.0);
  if (rows == 0) return;
  const Tensor per_row = Tensor::empty({rows, 4}, DType::F64, a.x.device());
  check_cuda(launch_norm_row_backward_reduce(elem_type_of(a.x.dtype()), a.grad_output.data_ptr(),
                                             a.x.data_ptr(), dims_of(L), ptr_or_null(a.weight),
                                             static_cast<double*>(per_row.data_ptr()),
                                             ptr_or_null(a.relu_output), stream_for(dev)),
             "norm.backward_reduce kernel");
  const std::vector<double> r = download_f64(per_row);
  // The moments first, then each row's H shifted to its statistic's mean.
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto k = static_cast<std::size_t>(4 * i);
    const double row[3] = {static_cast<double>(L.s), r[k], r[k + 1]};
    kernels::merge_moments_into(out + 5 * L.stat(i / L.c, i % L.c), row);
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto k = static_cast<std::size_t>(4 * i);
    double* o = out + 5 * L.stat(i / L.c, i % L.c);
    o[3] += r[k + 2];
    o[4] += r[k + 3] + (r[k] - o[1]) * r[k + 2];
  }
}

void backward_apply(const kernels::NormBackwardApplyArgs& a) {
  const NormLayout& L = a.layout;
  const int dev = a.x.device().index;
  DeviceGuard guard(dev);
  const bool gw = a.grad_weight.defined(), gb = a.grad_bias.defined();
  const Tensor mean = f64_on(a.mean, dev), invstd = f64_on(a.invstd, dev);
  const Tensor mg = f64_on(a.mean_g, dev), mgx = f64_on(a.mean_gxhat, dev);
  NormBackwardStats st;
  st.mean = f64_or_null(mean);
  st.invstd = f64_or_null(invstd);
  st.mean_g = f64_or_null(mg);
  st.mean_gxhat = f64_or_null(mgx);
  void* gx = a.grad_input.defined() ? a.grad_input.data_ptr() : nullptr;
  const ElemType t = elem_type_of(a.x.dtype());
  if (L.elementwise_affine) {
    const std::int64_t params = L.params();
    const Tensor sums = Tensor::empty({2, params}, DType::F64, a.x.device());
    auto* s = static_cast<double*>(sums.data_ptr());
    check_cuda(launch_norm_backward_apply_elementwise(t, a.grad_output.data_ptr(), a.x.data_ptr(),
                                                      gx, dims_of(L), st, ptr_or_null(a.weight),
                                                      gw ? s : nullptr, gb ? s + params : nullptr,
                                                      ptr_or_null(a.relu_output), stream_for(dev)),
               "norm.backward_apply kernel");
    // The f64 sums rounded to the parameters' dtype on the device (the
    // output is a handle to the caller's storage: a copy of it writes there).
    if (gw) Tensor(a.grad_weight).copy_(sums.narrow(0, 0, 1).view({params}));
    if (gb) Tensor(a.grad_bias).copy_(sums.narrow(0, 1, 1).view({params}));
    return;
  }
  const std::int64_t rows = L.n * L.c;
  if (rows == 0) return;
  const Tensor per_row = Tensor::empty({rows, 2}, DType::F64, a.x.device());
  check_cuda(launch_norm_backward_apply_rows(t, a.grad_output.data_ptr(), a.x.data_ptr(), gx,
                                             dims_of(L), st, ptr_or_null(a.weight),
                                             static_cast<double*>(per_row.data_ptr()),
                                             ptr_or_null(a.relu_output), stream_for(dev)),
             "norm.backward_apply kernel");
  if (!gw && !gb) return;
  const std::vector<double> r = download_f64(per_row);
  const double* inv = a.invstd.data<double>();
  // Per channel on the host in f64 (n * s terms each), then rounded once.
  Tensor w_sum = Tensor::zeros({L.params()}, DType::F64),
         b_sum = Tensor::zeros({L.params()}, DType::F64);
  double *sw = w_sum.data<double>(), *sb = b_sum.data<double>();
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t ch = i % L.c, k = L.stat(i / L.c, ch);
    const auto q = static_cast<std::size_t>(2 * i);
    sw[ch] += r[q + 1] * inv[k];
    sb[ch] += r[q];
  }
  if (gw) Tensor(a.grad_weight).copy_(w_sum);
  if (gb) Tensor(a.grad_bias).copy_(b_sum);
}

}  // namespace

void register_norm_kernels() {
  const auto cuda = DeviceType::CUDA;
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel(kernels::kNormMoments, cuda, dt,
                    KernelFunction<kernels::NormMomentsArgs>(moments));
    register_kernel(kernels::kNormApply, cuda, dt, KernelFunction<kernels::NormApplyArgs>(apply));
    register_kernel(kernels::kNormBackwardReduce, cuda, dt,
                    KernelFunction<kernels::NormBackwardReduceArgs>(backward_reduce));
    register_kernel(kernels::kNormBackwardApply, cuda, dt,
                    KernelFunction<kernels::NormBackwardApplyArgs>(backward_apply));
  }
}

}  // namespace dtensor::cuda_backend
