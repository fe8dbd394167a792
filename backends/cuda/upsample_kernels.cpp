// The CUDA kernels of upsample's slots (dtensor/ops/kernels/upsample.h) for
// f32, f64, bf16 and f16. The host checks the taps as the CPU kernel does
// (a tap outside the window would write outside the tensor on the device),
// flattens them (ResampleTaps are vectors) and copies them to the device per
// call: a synchronous upload of a few KiB per call.
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/pool.h"
#include "backends/cuda/upsample.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/upsample.h"

namespace dtensor::cuda_backend {
namespace {

using kernels::ResampleTaps;

struct DeviceGeometry {
  ResampleGeometry g;
  Tensor indices, weights;

  DeviceGeometry(const Shape& window_shape, const std::vector<ResampleTaps>& d, int dev) {
    DTENSOR_CHECK_ARG(!d.empty() && d.size() <= 3 && window_shape.size() == d.size() + 2,
                      "upsample", "internal: interpolation over {} dims of a window {}", d.size(),
                      shape_str(window_shape));
    g.planes = window_shape[0] * window_shape[1];
    std::int64_t win[3] = {1, 1, 1};
    const std::size_t first = 3 - d.size();
    std::vector<std::int64_t> idx;
    std::vector<double> wts;
    std::size_t i0_at[3], i1_at[3], w0_at[3], w1_at[3];
    for (std::size_t i = 0; i < 3; ++i) {
      ResampleTaps t{{0}, {0}, {1.0}, {0.0}, 1};
      if (i >= first) {
        t = d[i - first];
        win[i] = window_shape[i - first + 2];
      }
      const auto outputs = t.i0.size();
      check_arg(t.w0.size() == outputs && (t.taps == 1 || (t.taps == 2 && t.i1.size() == outputs &&
                                                           t.w1.size() == outputs)),
                "upsample", "internal: inconsistent taps for spatial dim {}", i);
      for (std::size_t o = 0; o < outputs; ++o)
        check_arg(
            t.i0[o] >= 0 && t.i0[o] < win[i] && (t.taps == 1 || (t.i1[o] >= 0 && t.i1[o] < win[i])),
            "upsample", "internal: output {} reads outside the window", o);
      // Nearest dims carry i0 and w0 twice: the kernels read the second
      // tap's arrays only when taps == 2.
      const auto& i1 = t.taps == 2 ? t.i1 : t.i0;
      const auto& w1 = t.taps == 2 ? t.w1 : t.w0;
      g.taps[i] = t.taps;
      g.outputs[i] = static_cast<long long>(outputs);
      i0_at[i] = idx.size();
      idx.insert(idx.end(), t.i0.begin(), t.i0.end());
      i1_at[i] = idx.size();
      idx.insert(idx.end(), i1.begin(), i1.end());
      w0_at[i] = wts.size();
      wts.insert(wts.end(), t.w0.begin(), t.w0.end());
      w1_at[i] = wts.size();
      wts.insert(wts.end(), w1.begin(), w1.end());
    }
    g.stride[0] = win[1] * win[2];
    g.stride[1] = win[2];
    g.win_plane = win[0] * win[1] * win[2];
    g.out_plane = g.outputs[0] * g.outputs[1] * g.outputs[2];
    indices = upload_i64(idx, dev);
    weights = upload_f64(wts, dev);
    const auto* ip = static_cast<const long long*>(indices.data_ptr());
    const auto* wp = static_cast<const double*>(weights.data_ptr());
    for (int i = 0; i < 3; ++i) {
      g.i0[i] = ip + i0_at[i];
      g.i1[i] = ip + i1_at[i];
      g.w0[i] = wp + w0_at[i];
      g.w1[i] = wp + w1_at[i];
    }
  }
};

void run_forward(const kernels::UpsampleForwardArgs& a) {
  DTENSOR_CHECK_ARG(a.output.shape() == kernels::resample_output_shape(a.window.shape(), a.dims),
                    "upsample", "internal: output {} for outputs {}", shape_str(a.output.shape()),
                    shape_str(kernels::resample_output_shape(a.window.shape(), a.dims)));
  const int dev = a.window.device().index;
  DeviceGuard guard(dev);
  const DeviceGeometry dg(a.window.shape(), a.dims, dev);
  on_contiguous(a.window, a.output, [&](const Tensor& x, const Tensor& y) {
    check_cuda(launch_upsample_forward(elem_type_of(x.dtype()), x.data_ptr(), y.data_ptr(), dg.g,
                                       stream_for(dev)),
               "upsample.forward kernel");
  });
}

void run_backward(const kernels::UpsampleBackwardArgs& a) {
  DTENSOR_CHECK_ARG(
      a.grad_output.shape() == kernels::resample_output_shape(a.grad_window.shape(), a.dims),
      "upsample", "internal: local grad_output {} but the outputs are {}",
      shape_str(a.grad_output.shape()),
      shape_str(kernels::resample_output_shape(a.grad_window.shape(), a.dims)));
  const int dev = a.grad_window.device().index;
  DeviceGuard guard(dev);
  const DeviceGeometry dg(a.grad_window.shape(), a.dims, dev);
  gradient_on_contiguous(
      a.grad_output, a.grad_window, a.accumulate, [&](const Tensor& gy, const Tensor& gx) {
        const Tensor scratch = Tensor::empty(gx.shape(), DType::F64, gx.device());
        auto* s = static_cast<double*>(scratch.data_ptr());
        check_cuda(launch_upsample_backward(elem_type_of(gx.dtype()), gy.data_ptr(), s, dg.g,
                                            stream_for(dev)),
                   "upsample.backward kernel");
        check_cuda(launch_narrow_f64(elem_type_of(gx.dtype()), s, gx.data_ptr(), gx.numel(),
                                     stream_for(dev)),
                   "upsample.backward kernel");
      });
}

}  // namespace

void register_upsample_kernels() {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel(kernels::kUpsampleForward, DeviceType::CUDA, dt,
                    KernelFunction<kernels::UpsampleForwardArgs>(run_forward));
    register_kernel(kernels::kUpsampleBackward, DeviceType::CUDA, dt,
                    KernelFunction<kernels::UpsampleBackwardArgs>(run_backward));
  }
}

}  // namespace dtensor::cuda_backend
