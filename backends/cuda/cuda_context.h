// Per-device state of the CUDA backend: the one stream the library orders all
// its work on (copies, kernels, cuDNN, NCCL), and the device this process uses
// by default (picked from the local rank, docs/design.md §8).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>

namespace dtensor::cuda_backend {

/// Devices the runtime sees; 0 (and `reason` set) without a driver or device.
/// Cached after the first call: the answer does not change in a process.
int device_count(std::string* reason = nullptr);

/// One T per device (a stream, a cuDNN handle), made by `make(device)` on first
/// use and never destroyed: work may still be queued while static destructors
/// run.
template <typename T>
class PerDevice {
 public:
  template <typename Make>
  T get(int device, Make&& make) {
    std::lock_guard lock(mu_);
    auto it = items_.find(device);
    if (it != items_.end()) return it->second;
    return items_.emplace(device, make(device)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<int, T> items_;
};

/// The library's stream on `device`, created on first use (non-blocking, so it
/// does not serialise with other libraries' work on the legacy default stream).
cudaStream_t stream_for(int device);

/// The default device: chosen by set_default_device, else local_rank % count.
int default_device();
void set_default_device(int device);
/// Records this process's local rank; the device is chosen from it on first use
/// (so CPU-only programs never initialise the driver).
void set_local_rank(int local_rank);

/// Makes `device` current for this thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace dtensor::cuda_backend
