// The CUDA kernels of the pools' slots (dtensor/ops/kernels/pool.h) for
// f32, f64, bf16 and f16. The host flattens the taps (PoolTaps are vectors
// of vectors) into one index array and avg_pool's divisors into per-dim
// factors, and copies both to the device per call: a synchronous upload of
// a few KiB, cheap beside a U-Net block's pool but a round trip each call
// (a cache keyed by the taps would remove it).
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/pool.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/pool.h"

namespace dtensor::cuda_backend {
namespace {

using kernels::AvgDivisor;
using kernels::PoolTaps;

// The geometry and the device buffers its pointers point into.
struct DeviceGeometry {
  PoolGeometry g;
  Tensor indices, factors;

  DeviceGeometry(const Shape& window_shape, const std::vector<PoolTaps>& d, int dev,
                 const AvgDivisor* rule) {
    DTENSOR_CHECK_ARG(!d.empty() && d.size() <= 3 && window_shape.size() == d.size() + 2, "pool",
                      "internal: pool over {} dims of a window {}", d.size(),
                      shape_str(window_shape));
    g.planes = window_shape[0] * window_shape[1];
    // Right-aligned: the last spatial dim is always dim 2.
    std::int64_t win[3] = {1, 1, 1};
    const PoolTaps* taps[3] = {nullptr, nullptr, nullptr};
    const std::size_t first = 3 - d.size();
    for (std::size_t i = 0; i < d.size(); ++i) {
      win[first + i] = window_shape[i + 2];
      taps[first + i] = &d[i];
    }
    const std::int64_t stride[3] = {win[1] * win[2], win[2], 1};
    std::vector<std::int64_t> flat;
    std::vector<double> fac;
    std::size_t start_at[3], offset_at[3], factor_at[3];
    for (int i = 0; i < 3; ++i) {
      std::vector<std::int64_t> start{0}, offset;
      factor_at[i] = fac.size();
      if (!taps[i]) {
        offset.push_back(0);
        start.push_back(1);
        fac.push_back(1.0);
      } else {
        for (std::size_t o = 0; o < taps[i]->taps.size(); ++o) {
          const auto& t = taps[i]->taps[o];
          for (auto w : t)
            offset.push_back(w * stride[i]);
          start.push_back(static_cast<std::int64_t>(offset.size()));
          double f = 1.0;
          if (rule && !rule->divisor_override)
            f = static_cast<double>(rule->count_include_pad ? taps[i]->padded_size.at(o)
                                                            : static_cast<std::int64_t>(t.size()));
          fac.push_back(f);
        }
      }
      g.outputs[i] = static_cast<long long>(start.size()) - 1;
      start_at[i] = flat.size();
      flat.insert(flat.end(), start.begin(), start.end());
      offset_at[i] = flat.size();
      flat.insert(flat.end(), offset.begin(), offset.end());
    }
    // divisor_override: the whole divisor in dim 0's factors.
    if (rule && rule->divisor_override)
      for (std::size_t k = factor_at[0]; k < factor_at[1]; ++k)
        fac[k] = static_cast<double>(*rule->divisor_override);
    g.win_plane = win[0] * win[1] * win[2];
    g.out_plane = g.outputs[0] * g.outputs[1] * g.outputs[2];
    indices = upload_i64(flat, dev);
    factors = upload_f64(fac, dev);
    const auto* ip = static_cast<const long long*>(indices.data_ptr());
    const auto* fp = static_cast<const double*>(factors.data_ptr());
    for (int i = 0; i < 3; ++i) {
      g.start[i] = ip + start_at[i];
      g.offset[i] = ip + offset_at[i];
      g.factor[i] = fp + factor_at[i];
    }
  }
};

// Rounds the f64 scratch gradient into `out`.
void narrow_into(const Tensor& scratch, const Tensor& out, int dev, const char* what) {
  check_cuda(
      launch_narrow_f64(elem_type_of(out.dtype()), static_cast<const double*>(scratch.data_ptr()),
                        out.data_ptr(), out.numel(), stream_for(dev)),
      what);
}

void run_max_forward(const kernels::MaxPoolForwardArgs& a) {
  const int dev = a.window.device().index;
  DeviceGuard guard(dev);
  const DeviceGeometry dg(a.window.shape(), a.dims, dev, nullptr);
  on_contiguous(a.window, a.output, [&](const Tensor& x, const Tensor& y) {
    check_cuda(launch_max_pool(elem_type_of(x.dtype()), x.data_ptr(), nullptr, y.data_ptr(),
                               nullptr, dg.g, stream_for(dev)),
               "pool.max_forward kernel");
  });
}

void run_max_backward(const kernels::MaxPoolBackwardArgs& a) {
  const int dev = a.window.device().index;
  DeviceGuard guard(dev);
  const DeviceGeometry dg(a.window.shape(), a.dims, dev, nullptr);
  const Tensor x = a.window.contiguous();
  gradient_on_contiguous(
      a.grad_output, a.grad_window, a.accumulate, [&](const Tensor& gy, const Tensor& gx) {
        const Tensor scratch = Tensor::empty(gx.shape(), DType::F64, gx.device());
        check_cuda(launch_max_pool(elem_type_of(x.dtype()), x.data_ptr(), gy.data_ptr(), nullptr,
                                   static_cast<double*>(scratch.data_ptr()), dg.g, stream_for(dev)),
                   "pool.max_backward kernel");
        narrow_into(scratch, gx, dev, "pool.max_backward kernel");
      });
}

void run_avg_forward(const kernels::AvgPoolForwardArgs& a) {
  const int dev = a.window.device().index;
  DeviceGuard guard(dev);
  const DeviceGeometry dg(a.window.shape(), a.dims, dev, &a.rule);
  on_contiguous(a.window, a.output, [&](const Tensor& x, const Tensor& y) {
    check_cuda(launch_avg_pool_forward(elem_type_of(x.dtype()), x.data_ptr(), y.data_ptr(), dg.g,
                                       stream_for(dev)),
               "pool.avg_forward kernel");
  });
}

void run_avg_backward(const kernels::AvgPoolBackwardArgs& a) {
  const int dev = a.grad_window.device().index;
  DeviceGuard guard(dev);
  const DeviceGeometry dg(a.grad_window.shape(), a.dims, dev, &a.rule);
  gradient_on_contiguous(
      a.grad_output, a.grad_window, a.accumulate, [&](const Tensor& gy, const Tensor& gx) {
        const Tensor scratch = Tensor::empty(gx.shape(), DType::F64, gx.device());
        check_cuda(launch_avg_pool_backward(elem_type_of(gx.dtype()), gy.data_ptr(),
                                            static_cast<double*>(scratch.data_ptr()), dg.g,
                                            stream_for(dev)),
                   "pool.avg_backward kernel");
        narrow_into(scratch, gx, dev, "pool.avg_backward kernel");
      });
}

}  // namespace

void register_pool_kernels() {
  const auto cuda = DeviceType::CUDA;
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel(kernels::kMaxPoolForward, cuda, dt,
                    KernelFunction<kernels::MaxPoolForwardArgs>(run_max_forward));
    register_kernel(kernels::kMaxPoolBackward, cuda, dt,
                    KernelFunction<kernels::MaxPoolBackwardArgs>(run_max_backward));
    register_kernel(kernels::kAvgPoolForward, cuda, dt,
                    KernelFunction<kernels::AvgPoolForwardArgs>(run_avg_forward));
    register_kernel(kernels::kAvgPoolBackward, cuda, dt,
                    KernelFunction<kernels::AvgPoolBackwardArgs>(run_avg_backward));
  }
}

}  // namespace dtensor::cuda_backend
