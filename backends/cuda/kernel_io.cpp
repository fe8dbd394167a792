#include "backends/cuda/kernel_io.h"

#include <algorithm>
#include <cstring>

namespace dtensor::cuda_backend {

Tensor upload_f64(const std::vector<double>& values, int device) {
  Tensor h = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::F64);
  std::copy(values.begin(), values.end(), h.data<double>());
  return h.to(Device::cuda(device));
}

// The library's tensors have no integer dtype: the indices travel as the
// bits of an f64 tensor of as many elements (both 8 bytes) and the kernels
// read them as int64.
Tensor upload_i64(const std::vector<std::int64_t>& values, int device) {
  static_assert(sizeof(double) == sizeof(std::int64_t));
  Tensor h = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::F64);
  if (!values.empty()) std::memcpy(h.data_ptr(), values.data(), values.size() * sizeof(double));
  return h.to(Device::cuda(device));
}

Tensor f64_on(const Tensor& t, int device) {
  if (!t.defined()) return t;
  return t.contiguous().to(Device::cuda(device));
}

std::vector<double> download_f64(const Tensor& device_tensor) {
  const Tensor h = device_tensor.to(Device::cpu());
  return {h.data<double>(), h.data<double>() + h.numel()};
}

}  // namespace dtensor::cuda_backend
