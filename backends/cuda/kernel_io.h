// What the CUDA kernels of the library's kernel slots (norm, pool, channel,
// loss, upsample: dtensor/ops/kernels/*.h) share on the host: the element
// type of a tensor, and the small host <-> device transfers their contracts
// need (tap tables and statistics up, f64 sums and statistics down). Each
// transfer is a synchronous copy on the library's stream (Tensor::to), so a
// result handed back on the host is final; their cost is a round trip per
// call, small beside the kernels on a U-Net's blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/elementwise.h"
#include "dtensor/core/tensor.h"

namespace dtensor::cuda_backend {

inline ElemType elem_type_of(DType t) {
  return static_cast<ElemType>(static_cast<int>(t));  // values match, see elementwise.h
}

/// `values` as an f64 tensor on CUDA device `device`.
Tensor upload_f64(const std::vector<double>& values, int device);
/// `values` on CUDA device `device`, as the bits of an f64 tensor (the kernels
/// read its data as int64).
Tensor upload_i64(const std::vector<std::int64_t>& values, int device);
/// An f64 tensor (CPU or CUDA) on `device`; undefined stays undefined.
Tensor f64_on(const Tensor& t, int device);
/// A device f64 tensor's values on the host (synchronises the stream).
std::vector<double> download_f64(const Tensor& device_tensor);

/// The forward slots that take views (pool, upsample: a tile of a halo
/// window, a band of the output) run kernels that index contiguous tensors:
/// body(window, output) on `window` copied in when it is a view, and on a
/// contiguous buffer copied out into `output` when that is one (device
/// copies on the library's stream).
template <typename Body>
void on_contiguous(const Tensor& window, const Tensor& output, Body&& body) {
  const Tensor x = window.contiguous();
  const bool direct = output.is_contiguous();
  const Tensor y = direct ? output : Tensor::empty(output.shape(), output.dtype(), output.device());
  body(x, y);
  if (!direct) {
    Tensor dst = output;
    dst.copy_(y);
  }
}

/// The backward slots (pool, upsample): body(grad_output, result) writes
/// the window's gradient into `result`, overwriting it (contiguous). With
/// `accumulate` (the slot's contract: add into grad_window, a view) it is
/// written into a buffer and added into grad_window after; grad_output is
/// copied in when it is a view.
template <typename Body>
void gradient_on_contiguous(const Tensor& grad_output, const Tensor& grad_window, bool accumulate,
                            Body&& body) {
  const Tensor gy = grad_output.contiguous();
  if (!accumulate) {
    body(gy, grad_window);
    return;
  }
  const Tensor result =
      Tensor::empty(grad_window.shape(), grad_window.dtype(), grad_window.device());
  body(gy, result);
  Tensor dst = grad_window;
  dst.add_(result);
}

/// `p` as the device pointer of an optional tensor (nullptr when undefined).
inline const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}
inline const double* f64_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const double*>(t.data_ptr()) : nullptr;
}

}  // namespace dtensor::cuda_backend
