// The reductions over dims on CUDA tensors: sum_dims, mean_dims, amax, amin,
// sum_to_size, reduce_expand, reduce_tie_mask and the reduce.moments slot,
// registered for DeviceType::CUDA and every dtype with the CPU kernels'
// contract (backends/cpu/reduce_kernels.cpp): f64 arithmetic, one rounding,
// a mean divided by the global count so a sharded input's partial results
// add up. Each result is folded by one thread in x's order, so results do
// not change from run to run.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/reduce.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/reduce.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cuda_backend {
namespace {

using Int = std::int64_t;

Tensor fold(const Tensor& x_local, const std::vector<bool>& reduced, ReduceFold how, double scale,
            const Shape& out_shape, const std::string& op) {
  const Tensor x = x_local.contiguous();
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const ReduceLayout L = make_reduce_layout(x.shape(), reduced, op.c_str());
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  DTENSOR_CHECK_ARG(out.numel() == L.results, op, "internal: {} results for an output of {}",
                    L.results, shape_str(out_shape));
  check_cuda(launch_reduce_fold(how, elem_type_of(x.dtype()), x.data_ptr(), out.data_ptr(), L,
                                scale, stream_for(dev)),
             op + " kernel");
  return out;
}

LocalKernel reduction(ReduceFold how, bool mean) {
  return [how, mean](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& x = c.local(0);
    const IntList& dims = c.schema.int_list(1);
    const double scale = mean ? 1.0 / kernels::reduced_count(c) : 1.0;
    return {fold(x, kernels::reduced_mask(dims, x.shape().size()), how, scale,
                 c.output_specs.at(0).local_shape(), std::string(c.schema.op()))};
  };
}

// sum_to_size: the local gradient summed over the dims its target is
// broadcast along (the leading dims it lacks, and those where it has 1).
std::vector<Tensor> sum_to_size(const KernelCall& c) {
  const kernels::SumToSizeTarget t = kernels::sum_to_size_target(c);
  return {fold(c.local(0), t.reduced, ReduceFold::Sum, 1.0, t.local, "sum_to_size")};
}

std::vector<Tensor> expand(const KernelCall& c) {
  const Tensor g = c.local(0).contiguous();
  const Shape& xs = c.local(1).shape();
  const int dev = g.device().index;
  DeviceGuard guard(dev);
  const ReduceLayout L = make_reduce_layout(
      xs, kernels::reduced_mask(c.schema.int_list(2), xs.size()), "reduce_expand");
  Tensor out = Tensor::empty(xs, g.dtype(), g.device());
  check_cuda(launch_reduce_expand(elem_type_of(g.dtype()), g.data_ptr(), out.data_ptr(), L,
                                  c.schema.scalar(4), stream_for(dev)),
             "reduce_expand kernel");
  return {out};
}

std::vector<Tensor> tie_mask(const KernelCall& c) {
  const Tensor x = c.local(0).contiguous();
  const Tensor r = c.local(1).to(x.dtype()).contiguous();
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const ReduceLayout L = make_reduce_layout(
      x.shape(), kernels::reduced_mask(c.schema.int_list(2), x.shape().size()), "reduce_tie_mask");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  check_cuda(launch_reduce_tie_mask(elem_type_of(x.dtype()), x.data_ptr(), r.data_ptr(),
                                    out.data_ptr(), L, stream_for(dev)),
             "reduce_tie_mask kernel");
  return {out};
}

// (count, mean, M2) per result on the device, brought back into the slot's
// f64 CPU tensor.
void moments(const kernels::ReduceMomentsArgs& a) {
  const Tensor x = a.x.contiguous();
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const ReduceLayout L = make_reduce_layout(x.shape(), a.reduced, kernels::kReduceMoments.name);
  DTENSOR_CHECK_ARG(a.moments.numel() == 3 * L.results, kernels::kReduceMoments.name,
                    "internal: moments of {} elements for {} results", a.moments.numel(),
                    L.results);
  const Tensor m = Tensor::empty({L.results, 3}, DType::F64, x.device());
  check_cuda(launch_reduce_moments(elem_type_of(x.dtype()), x.data_ptr(),
                                   static_cast<double*>(m.data_ptr()), L, stream_for(dev)),
             "reduce.moments kernel");
  const std::vector<double> host = download_f64(m);
  std::copy(host.begin(), host.end(), a.moments.data<double>());
}

}  // namespace

ReduceLayout make_reduce_layout(const Shape& x_shape, const std::vector<bool>& reduced,
                                const char* op) {
  const Shape sizes = x_shape.empty() ? Shape{1} : x_shape;
  DTENSOR_CHECK_ARG(sizes.size() <= static_cast<std::size_t>(kMaxKernelDims), op,
                    "{} dims: the CUDA kernel takes at most {}", sizes.size(), kMaxKernelDims);
  ReduceLayout L;
  L.ndim = static_cast<int>(sizes.size());
  L.numel = shape_numel(sizes);
  Int x_stride = 1, out_stride = 1;
  for (int d = L.ndim - 1; d >= 0; --d) {
    const auto k = static_cast<std::size_t>(d);
    const bool r = !x_shape.empty() && reduced.at(k);
    L.sizes[d] = sizes[k];
    L.x_strides[d] = x_stride;
    L.reduced[d] = r;
    L.out_strides[d] = r ? 0 : out_stride;
    x_stride *= sizes[k];
    if (r)
      L.per_result *= sizes[k];
    else
      out_stride *= sizes[k];
  }
  L.results = out_stride;
  return L;
}

// Registration only: no CUDA call happens while the module loads.
void register_reduce_kernels() {
  const auto cuda = DeviceType::CUDA;
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel("sum_dims", cuda, dt, reduction(ReduceFold::Sum, false));
    register_kernel("mean_dims", cuda, dt, reduction(ReduceFold::Sum, true));
    register_kernel("amax", cuda, dt, reduction(ReduceFold::Max, false));
    register_kernel("amin", cuda, dt, reduction(ReduceFold::Min, false));
    register_kernel("sum_to_size", cuda, dt, LocalKernel(sum_to_size));
    register_kernel("reduce_expand", cuda, dt, LocalKernel(expand));
    register_kernel("reduce_tie_mask", cuda, dt, LocalKernel(tie_mask));
    register_kernel(kernels::kReduceMoments, cuda, dt,
                    KernelFunction<kernels::ReduceMomentsArgs>(moments));
  }
}

}  // namespace dtensor::cuda_backend
