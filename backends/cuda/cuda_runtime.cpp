// The public dtensor::cuda API (dtensor/cuda.h) in a build with CUDA.
#include <fmt/format.h>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "dtensor/cuda.h"

namespace dtensor::cuda {

bool is_built() {
  return true;
}
bool is_available() {
  return cuda_backend::device_count() > 0;
}
int device_count() {
  return cuda_backend::device_count();
}
std::string unavailable_reason() {
  std::string reason;
  cuda_backend::device_count(&reason);
  return reason;
}
int current_device() {
  return is_available() ? cuda_backend::default_device() : 0;
}
void set_device(int index) {
  cuda_backend::set_default_device(index);
}
void synchronize() {
  if (!is_available()) return;
  const int dev = cuda_backend::default_device();
  cuda_backend::DeviceGuard guard(dev);
  cuda_backend::check_cuda(cudaStreamSynchronize(cuda_backend::stream_for(dev)),
                           fmt::format("synchronize cuda:{}", dev));
}

}  // namespace dtensor::cuda
