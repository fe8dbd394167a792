#include "backends/cuda/cuda_context.h"

#include <atomic>

#include <fmt/format.h>

#include "backends/cuda/cuda_errors.h"
#include "dtensor/core/errors.h"

namespace dtensor::cuda_backend {
namespace {

std::atomic<int> g_local_rank{0};
std::atomic<int> g_default_device{-1};  // -1: not chosen yet

}  // namespace

int device_count(std::string* reason) {
  static std::once_flag once;
  static int count = 0;
  static std::string why;
  std::call_once(once, [] {
    // Without a driver this returns an error (not 0 devices), e.g.
    // cudaErrorInsufficientDriver or cudaErrorNoDevice.
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
      n = 0;
    } else if (n == 0) {
      why = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
    }
    count = n;
  });
  if (reason) *reason = why;
  return count;
}

cudaStream_t stream_for(int device) {
  static PerDevice<cudaStream_t> streams;
  return streams.get(device, [](int d) {
    DeviceGuard guard(d);
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
               fmt::format("creating the stream of cuda:{}", d));
    return s;
  });
}

int default_device() {
  int d = g_default_device.load();
  if (d >= 0) return d;
  std::string reason;
  const int n = device_count(&reason);
  if (n == 0) throw NotSupported("cuda", "no CUDA device: " + reason);
  d = g_local_rank.load() % n;
  int expected = -1;
  g_default_device.compare_exchange_strong(expected, d);
  return g_default_device.load();
}

void set_default_device(int device) {
  const int n = device_count();
  check_arg(device >= 0 && device < n, "cuda", "device {} is outside [0, {})", device, n);
  check_cuda(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
  g_default_device = device;
}

void set_local_rank(int local_rank) {
  g_local_rank = local_rank < 0 ? 0 : local_rank;
}

DeviceGuard::DeviceGuard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device)
    check_cuda(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace dtensor::cuda_backend
