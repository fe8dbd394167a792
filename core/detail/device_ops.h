// The hook through which the core reaches a device backend (CUDA) without
// including it (docs/design.md §3): Tensor::copy_ / fill_ / add_ on device tensors,
// and picking this rank's device. Backends register one DeviceOps per device
// type when the library loads; a build without the backend registers none, and
// the core then reports "built without CUDA".
#pragma once

#include <memory>

#include "dtensor/core/dtype.h"

namespace dtensor {
class Tensor;
}

namespace dtensor::detail {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  /// dst <- src (same shape; any strides and dtypes), where dst or src (or both)
  /// lives on this backend's device type and the other may be on the CPU.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  /// dst += src; same shape, dtype and device.
  virtual void add(const Tensor& dst, const Tensor& src) = 0;
  /// Number of usable devices (0 when there is no driver or no device).
  virtual int device_count() = 0;
  /// The device this thread allocates on by default.
  virtual int current_device() = 0;
  /// Makes device `local_rank % device_count()` current; a no-op without devices.
  virtual void select_local_device(int local_rank) = 0;
};

void register_device_ops(DeviceType type, std::shared_ptr<DeviceOps> ops);
/// The registered ops, or nullptr.
std::shared_ptr<DeviceOps> find_device_ops(DeviceType type);
/// The registered ops, or NotSupported naming `what` ("built without CUDA").
DeviceOps& device_ops(DeviceType type, const char* what);

}  // namespace dtensor::detail
